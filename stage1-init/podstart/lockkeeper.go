package podstart

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/stage1-init/selfexe"
	"github.com/pod1/pod1/starttricks"
)

// The pod's lock (rkt's open file description of the pod directory) must
// stay held until every process of the pod is gone, even if run is
// SIGKILLed (threats T21). PID 1 cannot hold it: the descriptor leads to
// the host's pod directory, and from there to the host's root, for
// anything in the pod that may read /proc/1/fd (an app with
// CAP_SYS_PTRACE; PID 1 has a root of its own, enterOwnRoot). So a small
// process outside the pod's pid namespace, in a session of its own and
// not killed with run, holds it and exits when PID 1 has: by then the
// kernel has killed and reaped every other process of the pod's pid
// namespace (PID 1's exit waits for that before its pidfd reports it).
//
// It also commits the final statuses PID 1 leaves pending as the pod ends
// (status.WritePending): each app PID 1 names on the commit pipe, as it
// reads the name, while the kernel ends PID 1, and when PID 1 is gone,
// what a PID 1 that died had sent. So a final status is durable before the
// lock is released, whoever commits it. Only those names: an app that
// reached PID 1's root may write in the status directory, and what it
// plants there must not become a status; nor does a commit replace a
// final status already in place.
//
// The keeper is the waiter's binary in its keeper role (waiter.c,
// keeper_main): a C program that only waits holds next to nothing, where
// a Go runtime would hold megabytes for the pod's whole life.
// startLockKeeper starts it, as the waiter's child (CLONE_PARENT), with
// kf (podStart.startKeeper), and returns its pid. Its argument is the
// status directory, below the pod directory.
func startLockKeeper(kf *handover.KeeperFiles) (int, error) {
	files := kf.Files()
	exe, exePath, err := selfexe.ReadOnlySibling(handover.WaiterBinary, files)
	if err != nil {
		return 0, fmt.Errorf("lock keeper: %w", err)
	}
	defer unix.Close(exe)
	kpid, err := syscall.ForkExec(exePath, []string{handover.RoleKeeper, layout.StatusDir}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   starttricks.Environ(starttricks.Current()),
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_PARENT},
	})
	if err != nil {
		return 0, fmt.Errorf("lock keeper: %w", err)
	}
	return kpid, nil
}
