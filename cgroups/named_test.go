package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
)

// Each hierarchy is walked once, from its widest mount: a second mount of
// it (a bind into a pod's tree) or a mount of a subtree adds nothing.
func TestHierarchyRootsOnePerSuperblock(t *testing.T) {
	infos := []*mountinfo.Info{
		{Major: 0, Minor: 30, Root: "/", Mountpoint: "/sys/fs/cgroup/unified", FSType: "cgroup2"},
		{Major: 0, Minor: 31, Root: "/sub", Mountpoint: "/mnt/pids-sub", FSType: "cgroup"},
		{Major: 0, Minor: 31, Root: "/", Mountpoint: "/sys/fs/cgroup/pids", FSType: "cgroup"},
		{Major: 0, Minor: 30, Root: "/", Mountpoint: "/var/lib/rkt/pods/run/x/stage1/rootfs/sys/fs/cgroup/unified", FSType: "cgroup2"},
		{Major: 0, Minor: 32, Root: "/only/a/subtree", Mountpoint: "/mnt/memory-sub", FSType: "cgroup"},
	}
	want := []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids", "/mnt/memory-sub"}
	if got := hierarchyRoots(infos); !slices.Equal(got, want) {
		t.Fatalf("hierarchyRoots = %v, want %v", got, want)
	}
}

// A name no group has is found nowhere, without an error (any user can
// read the cgroup trees).
func TestNamedNothing(t *testing.T) {
	got, err := Named(fmt.Sprintf("pod1-no-such-group-%d", os.Getpid()))
	if err != nil || len(got) != 0 {
		t.Fatalf("Named = %v, %v; want nothing", got, err)
	}
}

// Named finds a group at any depth in every mounted hierarchy (v1, v2,
// and both in a hybrid layout), and not the group of the same name below
// it.
func TestNamedFindsEveryHierarchyAtAnyDepth(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it creates a cgroup in every mounted hierarchy (run as root, as make test does)")
	}
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		t.Fatal(err)
	}
	roots := hierarchyRoots(infos)
	if len(roots) == 0 {
		t.Skip("no cgroup hierarchy is mounted")
	}
	name := fmt.Sprintf("pod1-named-test-%d", os.Getpid())
	var want, made []string
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if err := os.Remove(made[i]); err != nil {
				t.Errorf("remove %s: %v", made[i], err)
			}
		}
	})
	mkdir := func(d string) error {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		made = append(made, d)
		return nil
	}
	for i, root := range roots {
		// Depths 1 to 6: as deep as a systemd host's session scopes.
		d := filepath.Join(root, name+"-base")
		if err := mkdir(d); err != nil {
			t.Logf("hierarchy %s: %v (not used)", root, err)
			continue
		}
		for j := 0; j < i%6; j++ {
			d = filepath.Join(d, fmt.Sprintf("level%d", j))
			must(t, mkdir(d))
		}
		target := filepath.Join(d, name)
		must(t, mkdir(target))
		must(t, mkdir(filepath.Join(target, name)))
		want = append(want, target)
	}
	if len(want) == 0 {
		t.Fatal("no hierarchy took a group")
	}
	got, err := Named(name)
	if err != nil {
		t.Fatalf("Named: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Named(%q) =\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("%d hierarchies", len(want))
}
