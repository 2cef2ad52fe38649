package cgroups

import (
	"errors"
	"path/filepath"
)

// Prime readies the kernel for the cgroup moves a pod's start makes a few
// milliseconds later (PID 1 into its cgroup, each app into its own), and
// moves nothing: it writes "0" (the caller's own process) to the
// cgroup.procs of the cgroup the caller is in, in one hierarchy.
//
// Every write to a cgroup.procs takes the writer's side of the kernel's
// global cgroup_threadgroup_rwsem, which first waits for an RCU grace
// period (rcu_sync_enter), unless another writer was there within about a grace period before (or favordynmods is
// set on the cgroup2 mount). So the first move of a pod's start paid that
// wait, with PID 1 waiting for it (docs/design-start.md); after Prime, which
// the Go run calls as it starts when it is the entry point, in a goroutine
// of its own, the wait overlaps the validation of the pod and PID 1's
// start, and the moves that follow in its window are quick. (The waiter,
// when it is the entry point, does the same in C, and repeats it until
// the pod has started: waiter.c, prime_cgroups.) The moves hold
// cgroup_mutex during the wait as Prime does: it adds no waiting, it
// moves it earlier.
//
// Errors (no hierarchy, a cgroup that refuses processes) are returned for
// the caller to ignore: nothing depends on Prime but speed. The caller
// stays where it was, unless something moved it between Prime's reading
// of /proc/self/cgroup and its write, which would then move it back.
func Prime() error {
	self, err := Current()
	if err != nil {
		return err
	}
	dirs := self.dirs()
	if len(dirs) == 0 {
		return errors.New("no cgroup hierarchy")
	}
	return writeFile(filepath.Join(dirs[0], "cgroup.procs"), []byte("0"))
}
