package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/status"
)

// canary makes a host directory with a file, whose digest must not change.
func canary(t *testing.T) (dir, file, digest string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "canary")
	must(t, os.WriteFile(file, []byte("host data\n"), 0o644))
	return dir, file, treeDigest(t, dir)
}

// hostileRun runs the pod and checks what every hostile-image test must
// leave unchanged: the host canary, byte for byte, and the stage1's files.
func hostileRun(t *testing.T, p *Pod, o RunOpts, canaryDir, digest string) *Run {
	t.Helper()
	before := stage1Hashes(t, p)
	r := runPod(t, p, o)
	if got := treeDigest(t, canaryDir); got != digest {
		t.Errorf("host canary changed:\n%s\nwas\n%s", got, digest)
	}
	if after := stage1Hashes(t, p); !reflect.DeepEqual(before, after) {
		t.Errorf("stage1 files changed:\nbefore %v\nafter  %v", before, after)
	}
	return r
}

// T-DEV-1 (CVE-2025-31133's family): an image whose /dev/null and
// /dev/console are symlinks to a host file, and whose /dev/zero is a FIFO,
// changes nothing: the app's /dev is a fresh tmpfs with real nodes, so
// writes meant for the host file land in the null device.
func TestHostileDevEntries(t *testing.T) {
	dir, file, digest := canary(t)
	app := App{Name: "a", Exec: probe("write", "/dev/null", "pwned", "+", "write", "/dev/console", "pwned",
		"+", "stat", "/dev/null", "+", "stat", "/dev/zero", "+", "stat", "/dev/console"),
		Rootfs: func(t *testing.T, root string) {
			must(t, os.Mkdir(filepath.Join(root, "dev"), 0o755))
			must(t, os.Symlink(file, filepath.Join(root, "dev/null")))
			must(t, os.Symlink("../../../../../../../.."+file, filepath.Join(root, "dev/console")))
			must(t, unix.Mkfifo(filepath.Join(root, "dev/zero"), 0o666))
		}}
	p := newPod(t, []App{app}, nil)
	r := hostileRun(t, p, RunOpts{}, dir, digest)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, w := range []string{"stat /dev/null mode=20666 rdev=1:3", "stat /dev/zero mode=20666 rdev=1:5", "stat /dev/console mode=100644"} {
		if !strings.Contains(r.Stdout.String(), w) {
			t.Errorf("missing %q in %q", w, r.Stdout)
		}
	}
}

// T-MNT-2 (runc mounts.bats "[bind mount through a dangling symlink
// component]" and friends): a mount target that goes through a symlink of
// the image, absolute to a host path or relative with enough ".." to climb
// out, is resolved inside the app's root: the volume appears there and the
// host path is untouched. One that dangles inside the root makes the
// directories where it points, inside the root.
func TestMountTargetsThroughSymlinks(t *testing.T) {
	dir, _, digest := canary(t)
	v1, v2 := t.TempDir(), t.TempDir()
	vols := []map[string]any{{"name": "v1", "kind": "host", "source": v1}, {"name": "v2", "kind": "host", "source": v2}}
	var root string
	app := App{Name: "a", Exec: probe("touch", "/abs/x/one", "+", "touch", "/rel/y/two"),
		MPoints: []map[string]any{{"name": "v1", "path": "/abs/x"}, {"name": "v2", "path": "/rel/y"}},
		Rootfs: func(t *testing.T, r string) {
			root = r
			// The host path exists inside the image too: that is where
			// the symlinks must lead.
			must(t, os.MkdirAll(filepath.Join(r, dir), 0o755))
			must(t, os.Symlink(dir, filepath.Join(r, "abs")))
			must(t, os.Symlink(strings.Repeat("../", 20)+strings.TrimPrefix(dir, "/"), filepath.Join(r, "rel")))
		}}
	p := newPod(t, []App{app}, vols)
	r := hostileRun(t, p, RunOpts{}, dir, digest)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	for _, f := range []string{filepath.Join(v1, "one"), filepath.Join(v2, "two"), filepath.Join(root, dir, "x"), filepath.Join(root, dir, "y")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%v", err)
		}
	}

	// Links that dangle inside the root, one to the host canary's path
	// (absent from the image), one climbing past the root: as in rkt's
	// stage1 (TestMountSymlink), the directories are made where the links
	// point, inside the root; nothing is made on the host.
	out := "pod1-mount-escape-" + filepath.Base(v2)
	app = App{Name: "a", Exec: probe("touch", "/dangling/z/three", "+", "touch", "/up/"+out+"/four"),
		MPoints: []map[string]any{{"name": "v1", "path": "/dangling/z"}, {"name": "v2", "path": "/up/" + out}},
		Rootfs: func(t *testing.T, r string) {
			root = r
			must(t, os.Symlink(dir, filepath.Join(r, "dangling")))
			must(t, os.Symlink(strings.Repeat("../", 20), filepath.Join(r, "up")))
		}}
	p = newPod(t, []App{app}, vols)
	r = hostileRun(t, p, RunOpts{}, dir, digest)
	if r.Code != 0 {
		t.Fatalf("dangling: exit %d, %s", r.Code, r.Stderr)
	}
	for _, f := range []string{filepath.Join(v1, "three"), filepath.Join(v2, "four"), filepath.Join(root, dir, "z"), filepath.Join(root, out)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%v", err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "z")); err == nil {
		t.Errorf("made on the host: %s", filepath.Join(dir, "z"))
	}
	for _, d := range []string{"/" + out, filepath.Dir(root) + "/" + out} {
		if _, err := os.Lstat(d); err == nil {
			_ = os.RemoveAll(d)
			t.Errorf("made outside the root: %s", d)
		}
	}
}

// A volume whose source holds another volume's source shows the host's
// tree there: the inner source is a plain directory in the app, which it
// may rename like any other. PID 1's own root binds each source at its
// path, and the recursive bind of the outer one brought PID 1's bind of
// the inner one along, a mount the host does not have (rename failed with
// EBUSY). The app that renames is the pod's first, then its second.
func TestNestedVolumeSourceIsPlainInTheApp(t *testing.T) {
	for _, moverFirst := range []bool{true, false} {
		name := "second-app"
		if moverFirst {
			name = "first-app"
		}
		t.Run(name, func(t *testing.T) {
			parent, elsewhere := t.TempDir(), t.TempDir()
			must(t, os.Mkdir(filepath.Join(parent, "child"), 0o755))
			vols := []map[string]any{{"name": "parent", "kind": "host", "source": parent},
				{"name": "child", "kind": "host", "source": filepath.Join(parent, "child")}}
			mover := App{Name: "mover", Exec: probe("swap", "/p/child", elsewhere), MPoints: []map[string]any{{"name": "parent", "path": "/p"}}}
			other := App{Name: "other", Exec: probe("exit", "0"), MPoints: []map[string]any{{"name": "child", "path": "/c"}}}
			apps := []App{other, mover}
			if moverFirst {
				apps = []App{mover, other}
			}
			p := newPod(t, apps, vols)
			r := runPod(t, p, RunOpts{})
			if !strings.Contains(r.Stdout.String(), "swap done") {
				t.Fatalf("the app could not rename the inner source: %q %s", r.Stdout, r.Stderr)
			}
			if _, err := os.Stat(filepath.Join(parent, "child.old")); err != nil {
				t.Errorf("on the host: %v", err)
			}
		})
	}
}

// T-MNT-1 (CVE-2021-30465's swap, on the source side): an app that can
// write the parent of another app's volume source replaces that source
// with a symlink to a host directory between two starts of the other app.
// The restart is refused (the source is not what the pod was started
// with) instead of binding the host directory into the app.
func TestVolumeSourceSwapRefused(t *testing.T) {
	dir, _, digest := canary(t)
	parent := t.TempDir()
	must(t, os.Mkdir(filepath.Join(parent, "child"), 0o755))
	vols := []map[string]any{{"name": "parent", "kind": "host", "source": parent},
		{"name": "child", "kind": "host", "source": filepath.Join(parent, "child")}}
	apps := []App{
		{Name: "racer", Exec: probe("wait-file", "/p/child/ran", "+", "swap", "/p/child", dir, "+", "sleep", "1h"),
			MPoints: []map[string]any{{"name": "parent", "path": "/p"}}},
		{Name: "victim", Exec: probe("touch", "/c/ran", "+", "exit", "1"), MPoints: []map[string]any{{"name": "child", "path": "/c"}},
			Annotations: map[string]string{"pod1/restart-policy": "on-failure", "pod1/restart-backoff": "300ms", "pod1/start-limit-burst": "2", "pod1/start-limit-interval": "1h"}},
	}
	p := newPod(t, apps, vols)
	r := hostileRun(t, p, RunOpts{}, dir, digest)
	if !strings.Contains(r.Stdout.String(), "swap done") {
		t.Fatalf("the racer did not swap: %q %s", r.Stdout, r.Stderr)
	}
	// PID 1's own root holds the source as it was (a clone of it): once
	// swapped, it is no longer there, or no longer the same file.
	refused := strings.Contains(r.Stderr.String(), "is no longer the file it was when the pod started") ||
		strings.Contains(r.Stderr.String(), `app "victim": mount bind on /c: source: open`)
	if got := p.Status(t, "victim"); got != status.CodeStage1Failure || !refused {
		t.Fatalf("victim: status %d, stderr %q", got, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(parent, "child.old/ran")); err != nil {
		t.Errorf("the first run did not write its volume: %v", err)
	}
}

// T-FD-3 (CVE-2024-21626): a working directory under /proc, where
// /proc/self/fd/N could be a host directory fd, is refused for every N.
func TestWorkingDirectoryUnderProcRefused(t *testing.T) {
	wds := []string{"/proc/self/cwd", "/proc/1/root", "/proc/self/root/tmp"}
	for n := 3; n <= 10; n++ {
		wds = append(wds, fmt.Sprintf("/proc/self/fd/%d", n))
	}
	for _, wd := range wds {
		p := newPod(t, []App{{Name: "a", Exec: probe("cwd"), WD: wd}}, nil)
		r := runPod(t, p, RunOpts{ExtraFds: []*os.File{os.Stdin}})
		assertRefused(t, p, r, fmt.Sprintf(`app "a": workingDirectory: %q is inside /proc`, wd))
	}
}
