package launch

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/images"
	"github.com/pod1/pod1/safefile"
)

// testPod builds a stage1 ACI directory, an app ACI file and an app ACI
// directory under base and returns options running three apps: two from
// the same ACI file (so they share one overlay image dir) and one from the
// directory.
func testPod(t *testing.T, base string) Options {
	t.Helper()
	s1 := makeACIDir(t, filepath.Join(base, "stage1"), stage1Manifest, stage1Files("#!/bin/false\n"))
	helloDir := makeACIDir(t, filepath.Join(base, "hello-src"), helloManifest, []file{
		{path: "bin/hello", body: "hello binary", mode: 0o755},
		{path: "etc/os-release", body: "ID=test\n"},
	})
	helloACI := makeACIFile(t, helloDir, filepath.Join(base, "hello.aci"))
	dirApp := makeACIDir(t, filepath.Join(base, "dirapp"), dirAppManifest, []file{
		{path: "bin/hello", body: "dir binary", mode: 0o755},
	})
	vol, err := types.VolumeFromString("data,kind=empty,mode=0700")
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Dir:          filepath.Join(base, "data"),
		Stage1:       s1,
		UUIDFileSave: filepath.Join(base, "uuid"),
		Volumes:      []types.Volume{*vol},
		Apps: []AppOptions{
			{Image: helloACI, Args: []string{"extra"}, Env: []types.EnvironmentVariable{{Name: "FOO", Value: "cli"}, {Name: "NEW", Value: "n"}},
				Mounts: []schema.Mount{{Volume: "data", Path: "/data"}}},
			{Image: helloACI, Name: "second", Exec: "/bin/sh", Args: []string{"-c", "true"}, User: "1000", Group: "1000", WorkingDir: "/tmp"},
			{Image: dirApp},
		},
	}
}

func TestPrepareAbortOverlay(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	cleanupMounts(t, base)
	opts := testPod(t, base)

	p, err := Prepare(opts)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	data := opts.Dir
	if want := filepath.Join(data, "pods", "run", p.UUID); p.Dir != want {
		t.Fatalf("pod dir %s, want %s", p.Dir, want)
	}
	for _, s := range []string{"embryo", "prepare"} {
		if !emptyDir(t, filepath.Join(data, "pods", s)) {
			t.Errorf("pods/%s not empty after Prepare", s)
		}
	}
	assertMode(t, p.Dir, 0o750)
	checkLock(t, p)

	// Top-level pod files.
	for name, mode := range map[string]os.FileMode{
		"pod": 0o640, "pod-created": 0o640, "pod.lck": 0o600,
		"stage1TreeStoreID": 0o640, "overlay-prepared": 0o640, "stage1/manifest": 0o640,
	} {
		assertMode(t, filepath.Join(p.Dir, name), mode)
	}
	s1img, err := images.OpenDir(opts.Stage1)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(p.Dir, "stage1TreeStoreID")); got != s1img.TreeStoreID {
		t.Errorf("stage1TreeStoreID %q, want %q", got, s1img.TreeStoreID)
	}
	if got := readFile(t, filepath.Join(p.Dir, "stage1", "manifest")); got != stage1Manifest {
		t.Errorf("stage1/manifest not the image's manifest verbatim")
	}
	if got := readFile(t, opts.UUIDFileSave); got != p.UUID {
		t.Errorf("uuid file %q, want %q", got, p.UUID)
	}

	checkPodManifest(t, p)
	checkAppTrees(t, p, opts)

	// Mounts: the stage1 and the three apps, in the host namespace.
	mounts, err := MountsUnder(p.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 4 {
		t.Errorf("mounts under the pod: %v, want 4", mounts)
	}
	// rkt/status was touched through the overlay, so it is in the upper
	// dir where rkt status looks for exit codes.
	upper := filepath.Join(p.Dir, "overlay", s1img.TreeStoreID, "upper")
	if fi, err := os.Stat(filepath.Join(upper, "rkt", "status")); err != nil || !fi.IsDir() {
		t.Errorf("rkt/status not copied up into %s: %v", upper, err)
	}

	wantArgv := []string{filepath.Join(p.Dir, "stage1", "rootfs", "run"), "--net=default", "--local-config=/etc/rkt", p.UUID}
	if !reflect.DeepEqual(p.Argv, wantArgv) {
		t.Errorf("argv %q, want %q", p.Argv, wantArgv)
	}
	lockEnv := "RKT_LOCK_FD=" + itoa(int(p.Lock.Fd()))
	if n := len(p.Env); n < 3 || p.Env[n-3] != lockEnv || p.Env[n-2] != "RKT_SELINUX_CONTEXT=" || p.Env[n-1] != "RKT_SELINUX_MOUNT_CONTEXT=" {
		t.Errorf("env tail %q, want %s and empty SELinux contexts", p.Env[max(0, n-3):], lockEnv)
	}

	if err := Abort(p); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	assertNoMounts(t, base)
	if _, err := os.Stat(p.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod dir still there after Abort: %v", err)
	}
	if _, err := os.Stat(opts.UUIDFileSave); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uuid file still there after Abort: %v", err)
	}
	if err := Abort(p); err != nil {
		t.Errorf("second Abort: %v", err)
	}
	// The unpacked image stays in the store for the next run.
	if emptyDir(t, filepath.Join(data, "pod1", "images")) {
		t.Error("image store emptied by Abort")
	}
}

// checkLock verifies the lock is rkt's: the pod dir, O_RDONLY|O_DIRECTORY,
// close-on-exec until Exec, and flock'd exclusively.
func checkLock(t *testing.T, p *Prepared) {
	t.Helper()
	fd := int(p.Lock.Fd())
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("lock fd flags %#x, %v: want FD_CLOEXEC before exec", flags, err)
	}
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat(p.Dir, &b) != nil || a.Ino != b.Ino {
		t.Errorf("lock fd is not the pod dir")
	}
	other, err := unix.Open(p.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	if err := unix.Flock(other, unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("a second flock on the pod dir: %v, want EWOULDBLOCK (pod must look running)", err)
	}
}

func checkPodManifest(t *testing.T, p *Prepared) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(p.Dir, "pod"))
	if err != nil {
		t.Fatal(err)
	}
	var pm schema.PodManifest
	if err := json.Unmarshal(raw, &pm); err != nil {
		t.Fatalf("pod manifest: %v", err)
	}
	if pm.ACVersion.String() != "1.30.0" || pm.ACKind != "PodManifest" {
		t.Errorf("acVersion %s acKind %s", pm.ACVersion, pm.ACKind)
	}
	if v, _ := pm.Annotations.Get("coreos.com/rkt/stage1/mutable"); v != "false" {
		t.Errorf("mutable annotation %q", v)
	}
	if !strings.Contains(string(raw), `"ports":[]`) {
		t.Errorf("ports not an empty list: %s", raw)
	}
	if len(pm.Volumes) != 1 || pm.Volumes[0].Name != "data" || *pm.Volumes[0].Mode != "0700" {
		t.Errorf("volumes %+v", pm.Volumes)
	}
	var names []string
	for _, a := range pm.Apps {
		names = append(names, string(a.Name))
	}
	if want := []string{"hello", "second", "dir-app"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("app names %v, want %v", names, want)
	}
	hello, second := pm.Apps[0], pm.Apps[1]
	if got := []string(hello.App.Exec); !reflect.DeepEqual(got, []string{"/bin/hello", "img-arg", "extra"}) {
		t.Errorf("hello exec %q: args must be appended to the image exec", got)
	}
	wantEnv := types.Environment{{Name: "FOO", Value: "cli"}, {Name: "KEEP", Value: "k"}, {Name: "NEW", Value: "n"}}
	if !reflect.DeepEqual(hello.App.Environment, wantEnv) {
		t.Errorf("hello env %v, want %v", hello.App.Environment, wantEnv)
	}
	if len(hello.Mounts) != 1 || hello.Mounts[0].Volume != "data" || hello.Mounts[0].Path != "/data" {
		t.Errorf("hello mounts %+v", hello.Mounts)
	}
	if hello.Image.Name.String() != "example.com/hello" || !strings.HasPrefix(hello.Image.ID.String(), "sha512-") {
		t.Errorf("hello image %+v", hello.Image)
	}
	if v, _ := hello.Image.Labels.Get("version"); v != "1.0" {
		t.Errorf("hello image labels %v", hello.Image.Labels)
	}
	sa := second.App
	if got := []string(sa.Exec); !reflect.DeepEqual(got, []string{"/bin/sh", "-c", "true"}) || sa.User != "1000" || sa.Group != "1000" || sa.WorkingDirectory != "/tmp" {
		t.Errorf("second app overrides not applied: %+v", sa)
	}
	if hello.Image.ID != second.Image.ID {
		t.Errorf("same image, different ids")
	}
}

func checkAppTrees(t *testing.T, p *Prepared, opts Options) {
	t.Helper()
	helloImg, err := images.OpenFile(opts.Apps[0].Image, filepath.Join(opts.Dir, "pod1", "images"))
	if err != nil {
		t.Fatal(err)
	}
	s2 := filepath.Join(p.Dir, "stage1", "rootfs", "opt", "stage2")
	for app, body := range map[string]string{"hello": "hello binary", "second": "hello binary", "dir-app": "dir binary"} {
		if got := readFile(t, filepath.Join(s2, app, "rootfs", "bin", "hello")); got != body {
			t.Errorf("%s: bin/hello %q, want %q", app, got, body)
		}
		assertMode(t, filepath.Join(s2, app, "manifest"), 0o640)
		assertMode(t, filepath.Join(p.Dir, "appsinfo", app, "manifest"), 0o640)
		if readFile(t, filepath.Join(s2, app, "manifest")) != readFile(t, filepath.Join(p.Dir, "appsinfo", app, "manifest")) {
			t.Errorf("%s: manifests differ", app)
		}
	}
	if got := readFile(t, filepath.Join(p.Dir, "appsinfo", "hello", "treeStoreID")); got != helloImg.TreeStoreID {
		t.Errorf("hello treeStoreID %q, want %q", got, helloImg.TreeStoreID)
	}
	// Two apps of one image: one image dir, one upper/work per app.
	imgDir := filepath.Join(p.Dir, "overlay", helloImg.TreeStoreID)
	for _, d := range []string{"upper/hello", "upper/second", "work/hello", "work/second"} {
		if fi, err := os.Stat(filepath.Join(imgDir, d)); err != nil || !fi.IsDir() {
			t.Errorf("overlay dir %s: %v", d, err)
		}
	}
	// etc/mtab is added where etc exists (and lands in the upper dir).
	if l, err := os.Readlink(filepath.Join(s2, "hello", "rootfs", "etc", "mtab")); err != nil || l != "../proc/self/mounts" {
		t.Errorf("hello etc/mtab: %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(imgDir, "upper", "hello", "etc", "mtab")); err != nil {
		t.Errorf("etc/mtab not in the upper dir: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(s2, "dir-app", "rootfs", "etc")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etc created in an image without one: %v", err)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Preparing a pod makes durable only what a crash must not lose: a new
// image's store entry, the pod manifest (its file and the pod directory)
// and the move into run/, and the caller's --uuid-file-save file.
func TestPrepareFsyncsOnlyWhatMustSurvive(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	cleanupMounts(t, base)
	opts := testPod(t, base)
	var got []string
	safefile.Fsynced = func(p string) { got = append(got, filepath.Clean(p)) }
	defer func() { safefile.Fsynced = nil }()
	p, err := Prepare(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = Abort(p) }()
	pods := filepath.Join(opts.Dir, "pods")
	want := []string{
		// the image store's entry, the image being new to it
		// (hostside/images; the tree itself is made durable with
		// syncfs, which this does not count)
		filepath.Join(opts.Dir, "pod1", "images"),
		// the pod manifest, written while the pod is in prepare/
		filepath.Join(pods, "prepare", p.UUID, "pod"), filepath.Join(pods, "prepare", p.UUID),
		opts.UUIDFileSave, base, // --uuid-file-save
		filepath.Join(pods, "prepare"), filepath.Join(pods, "run"), // the move into run/
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fsyncs %q, want %q", got, want)
	}
}

// The move into run/ is made durable while the overlays are mounted, but
// Prepare returns, and so the stage1 is started, only once it is: a pod
// whose stage1 wrote statuses must not fall back to prepare/ in a crash.
func TestPrepareReturnsOnceTheMoveIsDurable(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	cleanupMounts(t, base)
	opts := testPod(t, base)
	runDir := filepath.Join(opts.Dir, "pods", "run")
	var synced atomic.Bool
	safefile.Fsynced = func(p string) {
		if filepath.Clean(p) == runDir {
			// The hook runs before the fsync it names: a Prepare that
			// did not wait for it would return during this sleep.
			time.Sleep(300 * time.Millisecond)
			synced.Store(true)
		}
	}
	defer func() { safefile.Fsynced = nil }()
	p, err := Prepare(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = Abort(p) }()
	if !synced.Load() {
		t.Fatal("Prepare returned before the move into run/ was made durable")
	}
}
