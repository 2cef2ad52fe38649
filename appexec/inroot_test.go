package appexec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A mount target's directories are made where the image's links point,
// dangling ones included, and never outside the root, however the links
// climb.
func TestMkdirInRootFollowsLinksInside(t *testing.T) {
	top := t.TempDir()
	r := filepath.Join(top, "root")
	for _, d := range []string{"root/dir1", "root/dir2"} {
		if err := os.MkdirAll(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"dir1/abs_dir2":  "/dir2",
		"dir1/rel_dir2":  "../dir2",
		"dir1/dangling":  "/notexists",
		"dir1/up":        "../../../../..",
		"dir1/abs_root":  "/",
		"dir1/loop":      "loop",
		"dir1/rel_chain": "abs_dir2/../dangling",
	}
	for l, to := range links {
		if err := os.Symlink(to, filepath.Join(r, l)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.Open(r)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for target, want := range map[string]string{
		"/dir1/abs_dir2/a/b":        "dir2/a/b",
		"/dir1/rel_dir2/c":          "dir2/c",
		"/dir1/dangling/n1/n2":      "notexists/n1/n2",
		"/dir1/up/escaped":          "escaped",
		"/dir1/../../../newdir":     "newdir",
		"../../../../x/y":           "x/y",
		"/dir1/abs_root/r1":         "r1",
		"/dir1/rel_chain/chained":   "dangling/chained", // ".." after a link is the link target's parent, as in the kernel
		"/dir1/up/dir1/dangling/z2": "notexists/z2",
	} {
		f, err := dirInRoot(root, target)
		if err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		var a, b unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &a); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := unix.Stat(filepath.Join(r, want), &b); err != nil {
			t.Errorf("%s: %v", target, err)
			continue
		}
		if a.Dev != b.Dev || a.Ino != b.Ino {
			t.Errorf("%s: the handle is not %s", target, want)
		}
	}
	if _, err := dirInRoot(root, "/dir1/loop/x"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("a loop of links: %v, want ELOOP", err)
	}
	ents, err := os.ReadDir(top)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("made outside the root: %v", ents)
	}
}
