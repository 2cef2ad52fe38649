package appexec

import (
	"testing"

	"github.com/moby/sys/mountinfo"
)

// The view of a cgroup is found in the mount of its hierarchy whose root
// holds it, component by component, and only there.
func TestSourceIn(t *testing.T) {
	mounts := []*mountinfo.Info{
		{FSType: "cgroup", Root: "/u/pod1-x", Mountpoint: "/sys/fs/cgroup/memory/u/pod1-x", VFSOptions: "rw,memory"},
		{FSType: "cgroup", Root: "/pod1-x", Mountpoint: "/sys/fs/cgroup/cpu,cpuacct/pod1-x", VFSOptions: "rw,cpu,cpuacct"},
		{FSType: "cgroup2", Root: "/pod1-x", Mountpoint: "/sys/fs/cgroup/unified/pod1-x", VFSOptions: "rw"},
		{FSType: "cgroup", Root: "/", Mountpoint: "/sys/fs/cgroup/pids", VFSOptions: "rw,pids"},
	}
	for _, c := range []struct {
		unified bool
		ctrls   []string
		path    string
		want    string
	}{
		{false, []string{"memory"}, "/u/pod1-x/apps/app-a", "/sys/fs/cgroup/memory/u/pod1-x/apps/app-a"},
		{false, []string{"cpu", "cpuacct"}, "/pod1-x/apps/app-a", "/sys/fs/cgroup/cpu,cpuacct/pod1-x/apps/app-a"},
		{true, nil, "/pod1-x/apps/app-a", "/sys/fs/cgroup/unified/pod1-x/apps/app-a"},
		{false, []string{"pids"}, "/pod1-x/apps/app-a", "/sys/fs/cgroup/pids/pod1-x/apps/app-a"},
		// Not below the root: a sibling whose name shares its prefix.
		{false, []string{"memory"}, "/u/pod1-xy/apps/app-a", ""},
		// A hierarchy the mounts do not show.
		{false, []string{"cpuset"}, "/", ""},
		// Every controller of the line must be the mount's.
		{false, []string{"cpu", "blkio"}, "/pod1-x", ""},
	} {
		if got := sourceIn(mounts, c.unified, c.ctrls, c.path); got != c.want {
			t.Errorf("%v %v %s: got %q, want %q", c.unified, c.ctrls, c.path, got, c.want)
		}
	}
}
