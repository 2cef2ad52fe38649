package gc

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// uuid is the test pods' UUID, one per test binary: a fixed one made two
// runs at once (or one killed, which left its cgroup) collide in the
// host's cgroup tree.
var uuid = func() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}()

func mkdirs(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func bind(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}

// removeTree stops at a mount, even a bind mount of the same file system,
// and leaves what is mounted there untouched.
func TestRemoveTreeNeverCrossesAMount(t *testing.T) {
	needRoot(t, "mounts a tmpfs")
	root := t.TempDir()
	canary := filepath.Join(root, "host")
	pod := filepath.Join(root, "pod")
	mkdirs(t, canary, filepath.Join(pod, "a/b/mnt"))
	if err := os.WriteFile(filepath.Join(canary, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bind(t, canary, filepath.Join(pod, "a/b/mnt"))
	err := removeTree(pod, nil)
	if !errors.Is(err, errCrossesMount) {
		t.Fatalf("removeTree through a mount: %v", err)
	}
	if _, err := os.Stat(filepath.Join(canary, "keep")); err != nil {
		t.Fatalf("canary removed: %v", err)
	}
}

func TestRemoveTree(t *testing.T) {
	needRoot(t, "gc runs as root, whose access to the mode-0 directories an image holds the removal relies on")
	root := t.TempDir()
	pod := filepath.Join(root, "pod")
	mkdirs(t, filepath.Join(pod, "a/b/c"), filepath.Join(pod, "d"))
	// More entries than one getdents64 call into the remover's buffer
	// returns.
	for i := 0; i < 2000; i++ {
		if err := os.WriteFile(filepath.Join(pod, "d", "file-of-a-longer-name-"+string(rune('a'+i%26))+time.Duration(i).String()), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(pod, "a/etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(pod, "a/b"), 0); err != nil {
		t.Fatal(err)
	}
	called := 0
	if err := removeTree(pod, func() { called++ }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(pod); !errors.Is(err, os.ErrNotExist) || called != 1 {
		t.Fatalf("pod still there (%v) or progress called %d times", err, called)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal("followed a symlink")
	}
}

// Mounts under a pod are unmounted deepest first; a busy one is detached,
// which leaves its content alone.
func TestUnmountUnder(t *testing.T) {
	needRoot(t, "mounts")
	root := t.TempDir()
	canary := filepath.Join(root, "host")
	pod := filepath.Join(root, "pod")
	mkdirs(t, canary, filepath.Join(pod, "outer"))
	if err := unix.Mount("tmpfs", filepath.Join(pod, "outer"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(pod, "outer"), unix.MNT_DETACH) })
	mkdirs(t, filepath.Join(pod, "outer/inner"))
	bind(t, canary, filepath.Join(pod, "outer/inner"))
	// Keep the inner mount busy.
	busy, err := os.Open(filepath.Join(pod, "outer/inner"))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ms, err := readMounts()
	if err != nil {
		t.Fatal(err)
	}
	if got := under(ms, pod); len(got) != 2 || got[0].point != filepath.Join(pod, "outer/inner") {
		t.Fatalf("mounts under the pod, deepest first: %+v", got)
	}
	if err := unmountUnder(pod, ms); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(pod, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(canary); err != nil {
		t.Fatal(err)
	}
}

// Marking never replaces a pod directory of the same name.
func TestRenameNoReplace(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, filepath.Join(root, "run", uuid), filepath.Join(root, "exited-garbage", uuid))
	err := renameNoReplace(filepath.Join(root, "run", uuid), filepath.Join(root, "exited-garbage", uuid))
	if !errors.Is(err, unix.EEXIST) {
		t.Fatalf("rename over a pod: %v", err)
	}
	if err := renameNoReplace(filepath.Join(root, "gone", uuid), filepath.Join(root, "x", uuid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rename of a missing pod: %v", err)
	}
}

func TestGCEntrypointManifest(t *testing.T) {
	dir := t.TempDir()
	mkdirs(t, filepath.Join(dir, "stage1"))
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "stage1/manifest"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"annotations":[{"name":"coreos.com/rkt/stage1/gc","value":"/gc"},{"name":"coreos.com/rkt/stage1/interface-version","value":"5"}]}`)
	if ep, v, err := gcEntrypoint(dir); ep != "/gc" || v != 5 || err != nil {
		t.Fatalf("%q %d %v", ep, v, err)
	}
	write(`{"annotations":[]}`)
	if _, _, err := gcEntrypoint(dir); !errors.Is(err, errNoGC) {
		t.Fatalf("no gc annotation: %v", err)
	}
}

// needRoot skips a test that cannot run as another user, saying why.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + why)
	}
}
