package tests

// make install, and pod1 as rkt's default stage1: rkt finds it through a
// stage1.d entry, with no --stage1-* flag, and a later install of another
// build is the stage1 rkt then runs.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/layout"
)

// installTimeout bounds one make in the scratch copy: it relinks the Go
// binaries (a new version) and packs the image.
var installTimeout = max(10*time.Minute, eventDeadline)

// buildCopy copies the source tree and what the build made to a scratch
// directory: make install there with another VERSION rebuilds the copy's
// binaries and image, never those the other tests run. The copy keeps
// the files' times, so only what the version changes is rebuilt.
func buildCopy(t *testing.T) string {
	t.Helper()
	// make install builds the binaries with the new version: the VMs of
	// make vm-test run the built tree and have no Go toolchain.
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go in PATH: make install rebuilds the binaries (the VMs of make vm-test have none)")
	}
	dst := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(dst, 0o755))
	cni, _ := filepath.Glob(filepath.Join(repoRoot, "build", "cni-plugins-*"))
	if len(cni) == 0 {
		t.Fatal("no build/cni-plugins-*: run make image first")
	}
	extra := []string{"bin"}
	for _, c := range cni {
		extra = append(extra, filepath.Join("build", filepath.Base(c)))
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "build/.waiter-cc")); err == nil {
		extra = append(extra, "build/.waiter-cc")
	}
	script := `set -e
tar -C "$1" --exclude=./build --exclude=./bin --exclude=./.git -cf - . | tar -C "$2" -xf -
src=$1 dst=$2; shift 2
tar -C "$src" -cf - "$@" | tar -C "$dst" -xf -`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", append([]string{"-c", script, "sh", repoRoot, dst}, extra...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("copying the tree: %v: %s", err, out)
	}
	return dst
}

// makeIn runs make in dir with the given arguments; it returns the output
// and whether make succeeded.
func makeIn(t *testing.T, dir string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, "make", append([]string{"-C", dir}, args...)...)
	c.WaitDelay = 5 * time.Second
	// A make of the tests' own run (MAKEFLAGS, MAKELEVEL) must not leak in.
	c.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("make %s: not done within %v: %s", strings.Join(args, " "), installTimeout, out)
	}
	return string(out), err == nil
}

// stage1Entry is a stage1.d entry as rkt's configuration reads it.
type stage1Entry struct {
	Kind     string `json:"rktKind"`
	Version  string `json:"rktVersion"`
	Name     string `json:"name"`
	ImageVer string `json:"version"`
	Location string `json:"location"`
}

func readEntry(t *testing.T, path string) stage1Entry {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	var e stage1Entry
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: %v: %s", path, err, b)
	}
	return e
}

// manifestVersion is the version label of an image manifest file.
func manifestVersion(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	var m struct {
		Name   string `json:"name"`
		Labels []struct{ Name, Value string }
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, l := range m.Labels {
		if l.Name == "version" {
			return l.Value
		}
	}
	return ""
}

// aciManifestVersion is the version label of an ACI file's manifest.
func aciManifestVersion(t *testing.T, aci string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, "tar", "-xOf", aci, "manifest").Output()
	if err != nil {
		t.Fatalf("tar -xOf %s manifest: %v", aci, err)
	}
	f := filepath.Join(t.TempDir(), "manifest")
	must(t, os.WriteFile(f, b, 0o644))
	return manifestVersion(t, f)
}

// outputOf runs a program to its end and returns its stdout.
func outputOf(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out)
}

// TestMakeInstallDestdir: make install and install-default-stage1 put
// pod1, the stage1 image and the stage1.d entry under DESTDIR, where rkt
// looks for them once the root is the real one; the entry names the
// image's own name and version; make uninstall takes all of it back.
func TestMakeInstallDestdir(t *testing.T) {
	src := buildCopy(t)
	root := t.TempDir()
	const ver = "pod1-install-test-1"
	if out, ok := makeIn(t, src, "install-default-stage1", "DESTDIR="+root, "VERSION="+ver); !ok {
		t.Fatalf("make install-default-stage1 DESTDIR=%s: %s", root, out)
	}
	var files []string
	must(t, filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files = append(files, strings.TrimPrefix(p, root))
		}
		return err
	}))
	want := []string{"/etc/rkt/stage1.d/pod1.json", "/usr/lib/rkt/stage1-images/stage1-pod1.aci", "/usr/local/bin/pod1"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("installed %q, want %q", files, want)
	}
	if got := outputOf(t, filepath.Join(root, "usr/local/bin/pod1"), "version"); got != "pod1 "+ver+"\n" {
		t.Errorf("pod1 version: %q, want %q", got, "pod1 "+ver+"\n")
	}
	aci := filepath.Join(root, "usr/lib/rkt/stage1-images/stage1-pod1.aci")
	if got := aciManifestVersion(t, aci); got != ver {
		t.Errorf("the installed image's version label is %q, want %q", got, ver)
	}
	e := readEntry(t, filepath.Join(root, "etc/rkt/stage1.d/pod1.json"))
	wantE := stage1Entry{Kind: "stage1", Version: "v1", Name: "pod1.dev/stage1", ImageVer: ver,
		Location: "/usr/lib/rkt/stage1-images/stage1-pod1.aci"}
	if e != wantE {
		t.Errorf("stage1.d entry %+v, want %+v", e, wantE)
	}

	// Another entry in the same stage1.d would make rkt refuse every
	// command ("already specified"): the install names it instead.
	other := filepath.Join(root, "etc/rkt/stage1.d/coreos.json")
	must(t, os.WriteFile(other, []byte(`{"rktKind":"stage1","rktVersion":"v1","location":"/x.aci"}`), 0o644))
	out, ok := makeIn(t, src, "install-default-stage1", "DESTDIR="+root, "VERSION="+ver)
	if ok || !strings.Contains(out, other+" also names rkt's default stage1") {
		t.Errorf("install-default-stage1 beside another entry: ok=%v, want a line naming %s:\n%s", ok, other, out)
	}
	must(t, os.Remove(other))

	if out, ok := makeIn(t, src, "uninstall", "DESTDIR="+root, "VERSION="+ver); !ok {
		t.Fatalf("make uninstall: %s", out)
	}
	must(t, filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			t.Errorf("left after make uninstall: %s", p)
		}
		return err
	}))
}

// TestRktDefaultStage1FromStage1D: with pod1 installed as rkt's default
// stage1 (make install-default-stage1), `rkt run IMAGE` with no --stage1-*
// flag runs pod1's stage1; a second install of another build (another
// version) is the stage1 rkt runs next, not the one it cached. rkt reads
// only the scratch root's configuration (--local-config, --system-config)
// and its own --dir. The installed pod1 runs the installed image too.
func TestRktDefaultStage1FromStage1D(t *testing.T) {
	src := buildCopy(t)
	r := newRkt(t)
	root := t.TempDir()
	dirs := []string{
		"PREFIX=" + filepath.Join(root, "usr/local"),
		"STAGE1_IMAGES_DIR=" + filepath.Join(root, "usr/lib/rkt/stage1-images"),
		"RKT_CONFIG_DIR=" + filepath.Join(root, "etc/rkt"),
	}
	sysConfig := filepath.Join(root, "usr/lib/rkt")
	must(t, os.MkdirAll(sysConfig, 0o755))
	img := r.aci("default-stage1", map[string]any{"exec": []string{"/bin/probe", "exit", "7"}}, nil)

	for i, ver := range []string{"pod1-install-test-a", "pod1-install-test-b"} {
		if out, ok := makeIn(t, src, append([]string{"install-default-stage1", "VERSION=" + ver}, dirs...)...); !ok {
			t.Fatalf("install %d: make install-default-stage1: %s", i+1, out)
		}
		uf := filepath.Join(r.dir, "uuid-"+ver)
		o, e, code := r.exec(rktTimeout, nil, "--local-config="+filepath.Join(root, "etc/rkt"), "--system-config="+sysConfig,
			"run", "--net=none", "--uuid-file-save="+uf, img)
		b, _ := os.ReadFile(uf)
		uuid := strings.TrimSpace(string(b))
		if uuid != "" {
			ownPod(uuid)
		}
		if code != 7 || uuid == "" {
			t.Fatalf("install %d (%s): rkt run with no --stage1-* flag: exit %d, uuid %q, want 7\nstdout: %s\nstderr: %s", i+1, ver, code, uuid, o, e)
		}
		pod := filepath.Join(r.data, "pods/run", uuid)
		if got := manifestVersion(t, filepath.Join(pod, layout.Stage1Manifest)); got != ver {
			t.Errorf("install %d: the pod's stage1 is version %q, want %q", i+1, got, ver)
		}
		if got := outputOf(t, filepath.Join(pod, "stage1/rootfs/stage1-init"), "--version"); got != "pod1 stage1 "+ver+"\n" {
			t.Errorf("install %d: the pod's stage1-init says %q, want version %q", i+1, got, ver)
		}
		if s := r.status(uuid); s.appExit("default-stage1") != 7 {
			t.Errorf("install %d: rkt status: %+v, want the app's exit 7", i+1, s)
		}
	}
	images := r.rkt("image", "list", "--no-legend", "--fields=name")
	if n := len(regexp.MustCompile(`(?m)^pod1\.dev/stage1`).FindAllString(images, -1)); n != 2 {
		t.Errorf("rkt image list: %d pod1 stage1 images, want one per install:\n%s", n, images)
	}

	// The installed pod1, far from any build tree, runs the installed
	// image by default.
	pod1 := filepath.Join(root, "usr/local/bin/pod1")
	if got := outputOf(t, pod1, "version"); got != "pod1 pod1-install-test-b\n" {
		t.Errorf("installed pod1 version: %q", got)
	}
	data := t.TempDir()
	t.Cleanup(func() { podGC(t, pod1, data) })
	uf := filepath.Join(data, "uuid")
	ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, pod1, "run", "--dir="+data, "--net=none", "--uuid-file-save="+uf, img)
	c.WaitDelay = 5 * time.Second
	out, err := c.CombinedOutput()
	b, _ := os.ReadFile(uf)
	uuid := strings.TrimSpace(string(b))
	if uuid != "" {
		ownPod(uuid)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 || uuid == "" {
		t.Fatalf("installed pod1 run: %v, uuid %q, want exit 7: %s", err, uuid, out)
	}
	if got := manifestVersion(t, filepath.Join(data, "pods/run", uuid, layout.Stage1Manifest)); got != "pod1-install-test-b" {
		t.Errorf("installed pod1 run: the pod's stage1 is version %q", got)
	}
}

// podGC garbage-collects every pod of a private data directory with the
// given pod1.
func podGC(t *testing.T, pod1, data string) {
	ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, pod1, "gc", "--dir="+data, "--grace-period=0s").CombinedOutput(); err != nil {
		t.Errorf("pod1 gc: %v: %s", err, out)
	}
	if err := launch.UnmountAll(data); err != nil {
		t.Errorf("unmount %s: %v", data, err)
	}
}

// TestPod1Version: pod1 version, the stage1 binaries and the stage1
// image's version label say the same version, the build's.
func TestPod1Version(t *testing.T) {
	out := outputOf(t, bin("pod1"), "version")
	ver, ok := strings.CutPrefix(strings.TrimSuffix(out, "\n"), "pod1 ")
	if !ok || ver == "" || strings.ContainsAny(ver, " \n") {
		t.Fatalf("pod1 version: %q, want one line: pod1 VERSION", out)
	}
	for _, b := range []string{"stage1-init", "pod1-init"} {
		if got := outputOf(t, bin(b), "--version"); got != "pod1 stage1 "+ver+"\n" {
			t.Errorf("%s --version: %q, want version %q", b, got, ver)
		}
	}
	if got := aciManifestVersion(t, stage1ACI(t)); got != ver {
		t.Errorf("build/stage1.aci's version label is %q, want pod1's %q", got, ver)
	}
	code, msg := pod1cli(t, nil, "version", "extra")
	if code != 254 || strings.Count(msg, "\n") != 1 {
		t.Errorf("pod1 version extra: %d %q, want 254 and one line", code, msg)
	}
}
