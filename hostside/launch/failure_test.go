package launch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/appc/spec/schema"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

func TestPrepareNoOverlay(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	cleanupMounts(t, base)
	opts := testPod(t, base)
	opts.NoOverlay = true
	// A hardlink and a setuid file in the stage1 tree must survive the copy.
	s1root := filepath.Join(opts.Stage1, "rootfs")
	if err := os.Link(filepath.Join(s1root, "stage1-init"), filepath.Join(s1root, "init-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s1root, "suid"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(s1root, "suid"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(s1root, "run"), 12, 34); err != nil {
		t.Fatal(err)
	}

	p, err := Prepare(opts)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	assertNoMounts(t, base)
	rootfs := filepath.Join(p.Dir, "stage1", "rootfs")
	if l, err := os.Readlink(filepath.Join(rootfs, "run")); err != nil || l != "stage1-init" {
		t.Errorf("run symlink: %q, %v", l, err)
	}
	var run, a, b unix.Stat_t
	if err := unix.Lstat(filepath.Join(rootfs, "run"), &run); err != nil || run.Uid != 12 || run.Gid != 34 {
		t.Errorf("symlink owner %d:%d, %v", run.Uid, run.Gid, err)
	}
	if unix.Stat(filepath.Join(rootfs, "stage1-init"), &a) != nil || unix.Stat(filepath.Join(rootfs, "init-link"), &b) != nil || a.Ino != b.Ino {
		t.Errorf("hardlink not preserved")
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(rootfs, "suid"), &st); err != nil || st.Mode&0o7777 != 0o4755 {
		t.Errorf("setuid bit lost: %#o, %v", st.Mode&0o7777, err)
	}
	if got := readFile(t, filepath.Join(rootfs, "opt", "stage2", "hello", "rootfs", "bin", "hello")); got != "hello binary" {
		t.Errorf("app tree not copied: %q", got)
	}
	for _, f := range []string{"overlay-prepared", "appsinfo/hello/treeStoreID", "overlay"} {
		if _, err := os.Lstat(filepath.Join(p.Dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists without overlay: %v", f, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(rootfs, "opt", "stage2", "hello", "rootfs", "etc", "mtab")); err != nil || l != "../proc/self/mounts" {
		t.Errorf("etc/mtab in copied tree: %q, %v", l, err)
	}
	if err := Abort(p); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if _, err := os.Stat(p.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod dir left: %v", err)
	}
}

// assertNoPods checks that no pod directory exists in any state.
func assertNoPods(t *testing.T, data string) {
	t.Helper()
	for _, s := range layout.PodStates() {
		if !emptyDir(t, filepath.Join(data, "pods", s)) {
			t.Errorf("pods/%s not empty after a failed Prepare", s)
		}
	}
}

func TestPrepareRefusesBadInput(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	cleanupMounts(t, base)
	good := testPod(t, base)
	noRun := makeACIDir(t, filepath.Join(base, "norun"),
		`{"acKind":"ImageManifest","acVersion":"0.8.11","name":"s1"}`, stage1Files("x"))
	noApp := makeACIDir(t, filepath.Join(base, "noapp"),
		`{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/noapp","labels":[{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}]}`, nil)

	cases := []struct {
		name string
		mod  func(o *Options)
		want string
	}{
		{"no-run-annotation", func(o *Options) { o.Stage1 = noRun }, "coreos.com/rkt/stage1/run"},
		{"duplicate-name", func(o *Options) { o.Apps[1].Name = "hello" }, "duplicate app name"},
		{"bad-name", func(o *Options) { o.Apps[1].Name = "Bad_Name" }, "--name"},
		{"unknown-volume", func(o *Options) { o.Apps[0].Mounts = []schema.Mount{{Volume: "nope", Path: "/x"}} }, "volume=nope"},
		{"no-exec", func(o *Options) { o.Apps = []AppOptions{{Image: noApp}} }, "--exec"},
		{"bad-env", func(o *Options) {
			o.Apps[0].Env = append(o.Apps[0].Env, o.Apps[0].Env[0])
			o.Apps[0].Env[2].Name = "1bad"
		}, "pod manifest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			o.Apps = append([]AppOptions(nil), good.Apps...)
			for i := range o.Apps {
				o.Apps[i].Env = append(o.Apps[i].Env[:0:0], good.Apps[i].Env...)
			}
			tc.mod(&o)
			_, err := Prepare(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Prepare error %v, want it to mention %q", err, tc.want)
			}
			assertNoPods(t, o.Dir)
			assertNoMounts(t, base)
			if _, err := os.Stat(o.UUIDFileSave); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("uuid file written for a failed Prepare")
			}
		})
	}
}

// TestPrepareUndoesAfterMounting fails Prepare after the stage1 overlay is
// mounted and checks that it unmounts and removes everything.
func TestPrepareUndoesAfterMounting(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	cleanupMounts(t, base)
	good := testPod(t, base)

	// opt -> / would put opt/stage2 (manifests, app mounts) somewhere else.
	optLink := append(stage1Files("x"), file{path: "opt", link: "/"})
	escaping := makeACIDir(t, filepath.Join(base, "s1-optlink"), stage1Manifest, optLink)
	// The run entrypoint is checked only once the rootfs is in place.
	missingRun := makeACIDir(t, filepath.Join(base, "s1-norun"),
		strings.Replace(stage1Manifest, `"/run"`, `"/missing"`, 1), stage1Files("x"))

	for name, tc := range map[string]struct {
		stage1    string
		noOverlay bool
		want      error
	}{
		"opt-symlink":        {escaping, false, ErrEscape},
		"opt-symlink-copy":   {escaping, true, ErrEscape},
		"missing-entrypoint": {missingRun, false, os.ErrNotExist},
		"missing-entry-copy": {missingRun, true, os.ErrNotExist},
	} {
		t.Run(name, func(t *testing.T) {
			o := good
			o.Stage1, o.NoOverlay = tc.stage1, tc.noOverlay
			_, err := Prepare(o)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Prepare error %v, want %v", err, tc.want)
			}
			assertNoMounts(t, base)
			assertNoPods(t, o.Dir)
			if _, err := os.Lstat("/stage2"); err == nil {
				t.Errorf("/stage2 created on the host")
			}
		})
	}
}
