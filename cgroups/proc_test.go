package cgroups

import (
	"reflect"
	"testing"

	"github.com/moby/sys/mountinfo"
)

func TestParseProc(t *testing.T) {
	got := ParseProc("12:pids:/pod/app-a\n4:cpu,cpuacct:/pod\n1:name=systemd:/user.slice\n0::/pod/apps/app-b (deleted)\nnot a line\n")
	want := []Membership{
		{Hierarchy: "pids", Path: "/pod/app-a"},
		{Hierarchy: "cpu,cpuacct", Path: "/pod"},
		{Hierarchy: "name=systemd", Path: "/user.slice"},
		{Hierarchy: "", Unified: true, Path: "/pod/apps/app-b", Deleted: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseProc:\n%+v\nwant\n%+v", got, want)
	}
	for i, c := range [][]string{{"pids"}, {"cpu", "cpuacct"}, nil, nil} {
		if !reflect.DeepEqual(got[i].Controllers(), c) {
			t.Errorf("%q: controllers %q, want %q", got[i].Hierarchy, got[i].Controllers(), c)
		}
	}
}

// A hierarchy is joined through a mount of its whole tree that holds all
// its controllers: never a bind of a subtree, never a mount of only some.
func TestHierarchyMount(t *testing.T) {
	mounts := []*mountinfo.Info{
		{Root: "/pod", Mountpoint: "/sub2", FSType: "cgroup2"},
		{Root: "/", Mountpoint: "/sys/fs/cgroup/unified", FSType: "cgroup2"},
		{Root: "/", Mountpoint: "/sys/fs/cgroup/cpu", FSType: "cgroup", VFSOptions: "rw,cpu"},
		{Root: "/", Mountpoint: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", VFSOptions: "rw,cpu,cpuacct"},
		{Root: "/", Mountpoint: "/sys/fs/cgroup/systemd", FSType: "cgroup", VFSOptions: "rw,xattr,name=systemd"},
	}
	for h, want := range map[string]string{
		"": "/sys/fs/cgroup/unified", "cpu,cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		"name=systemd": "/sys/fs/cgroup/systemd", "pids": "",
	} {
		if got := hierarchyMount(mounts, h); got != want {
			t.Errorf("hierarchy %q: %q, want %q", h, got, want)
		}
	}
}
