package tests

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPodTreesOnAnotherFileSystem runs pods whose directories are on a
// tmpfs while the checkout (and its bin/) is not: TMPDIR on a tmpfs is the
// default on several distributions, and the harness must copy what it
// cannot hard-link across file systems.
func TestPodTreesOnAnotherFileSystem(t *testing.T) {
	mnt := t.TempDir()
	must(t, unix.Mount("tmpfs", mnt, "tmpfs", 0, "mode=0755,size=256m"))
	// Registered first, so it runs after the pods' cleanups.
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	var st, sb unix.Statfs_t
	must(t, unix.Statfs(mnt, &st))
	must(t, unix.Statfs(bin("probe"), &sb))
	if st.Fsid == sb.Fsid {
		t.Fatal("the tmpfs and the checkout share a file system")
	}
	t.Setenv("TMPDIR", mnt)

	// A subtest: t.TempDir picks its directory once per test.
	t.Run("pod", func(t *testing.T) {
		p := newPod(t, []App{{Name: "a", Exec: probe("exit", "7")}}, nil)
		if rel, err := filepath.Rel(mnt, p.Dir); err != nil || !filepath.IsLocal(rel) {
			t.Fatalf("pod dir %s is not on the tmpfs %s", p.Dir, mnt)
		}
		r := runPod(t, p, RunOpts{})
		if r.Code != 7 || p.Status(t, "a") != 7 {
			t.Fatalf("run exit %d, app status %d: %s", r.Code, p.Status(t, "a"), r.Stderr)
		}
	})
}
