package podstart

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/logx"
)

// forkPID1 starts PID 1 (syscall.ForkExec of exePath with argv and attr)
// from a thread of run that serves nothing else, on which the pod's
// bounding set (keep, podBoundingSet; nil keeps every capability) is
// already in place: PID 1 is born with it and need not drop it itself,
// one all-threads prctl per capability, each stopping and signalling all
// of PID 1's threads while the first app waits (reduceBoundingSet now
// only checks).
//
// The thread is locked and never unlocked, and its goroutine never
// returns, for two reasons:
//   - prctl(PR_CAPBSET_DROP) and capset act on the calling thread only,
//     and a bounding set never grows back: no other goroutine may run on
//     this thread, and the runtime clones no new thread from a locked one
//     (it asks its template thread), so nothing else of run, the lock
//     keeper or the network plugins, gets these sets;
//   - when run is the entry point, PID 1's parent-death signal
//     (takeHandover) is sent when the thread that cloned it exits, not
//     when run does: the thread must live as long as run. Under the
//     waiter, PID 1 is the waiter's child (CLONE_PARENT in attr) and the
//     waiter's death is what counts; the thread still gives PID 1 its
//     sets, as a clone takes the calling thread's credentials.
func forkPID1(keep []string, exePath string, argv []string, attr *syscall.ProcAttr) (int, error) {
	type result struct {
		pid int
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		if keep != nil {
			if err := boundThisThread(keep); err != nil {
				// PID 1 drops what is left itself.
				logx.Debugf("bounding set for PID 1: %v", err)
			}
		}
		pid, err := syscall.ForkExec(exePath, argv, attr)
		done <- result{pid, err}
		if err != nil {
			return // the thread ends with the goroutine: it cloned nothing
		}
		select {}
	}()
	r := <-done
	return r.pid, r.err
}

// boundThisThread makes the calling thread's inheritable set its permitted
// one, then drops from its bounding set every capability not in keep.
//
// A root process's exec recomputes its permitted set as its inheritable
// set plus its bounding set (a root exec counts the file's sets as full).
// With an empty inheritable set, PID 1 would start with the reduced
// bounding set as its permitted set, short of what it uses before it is in
// its own root (CAP_NET_ADMIN to set the pod's lo up, and whatever else
// the host's root may need) and of what it has kept so far, its caller's
// permitted set. With the inheritable set equal to the permitted one, PID
// 1's permitted set is exactly ours, its bounding set the pod's; it
// empties its inheritable set before it forks anything (clearInheritable),
// since any child of it executing as root would otherwise get everything
// back. The order matters: the kernel raises an inheritable capability
// only while it is in the bounding set. Each drop needs CAP_SETPCAP in the
// effective set, which run has as root and no bounding-set drop takes.
func boundThisThread(keep []string) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	last, err := capability.LastCap()
	if err != nil {
		return err
	}
	// Only what the bounding set holds can be made inheritable: a
	// permitted capability outside it (a caller may have one) stays out.
	var bound [2]uint32
	for c := capability.Cap(0); c <= last; c++ {
		if have, err := capability.GetBound(c); err == nil && have {
			bound[c/32] |= 1 << (c % 32)
		}
	}
	data[0].Inheritable = data[0].Permitted & bound[0]
	data[1].Inheritable = data[1].Permitted & bound[1]
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	for c := capability.Cap(0); c <= last; c++ {
		name := "CAP_" + strings.ToUpper(c.String())
		if slices.Contains(keep, name) || bound[c/32]&(1<<(c%32)) == 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
	}
	return nil
}
