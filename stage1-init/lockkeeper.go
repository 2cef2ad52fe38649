//go:build !pod1init

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/pod1/pod1/logx"
	"golang.org/x/sys/unix"
)

// roleLockKeeper is the process that holds the pod's lock for PID 1.
const roleLockKeeper = "pod1-lock"

// The lock keeper's fds: the lock, and a pidfd of PID 1.
const (
	keeperLockFd = 3
	keeperPidFd  = 4
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
// startLockKeeper starts it (the waiter's binary, or this one when the
// image has no waiter) for PID 1's pidfd, with cloneFlags (the waiter's
// CLONE_PARENT), and returns its pid.
func startLockKeeper(lock *os.File, pidfd int, cloneFlags uintptr) (int, error) {
	// The waiter's binary in its keeper role, when it is there: a C
	// program that only waits holds next to nothing, where a Go runtime
	// holds megabytes for the pod's whole life.
	w, exePath, err := readOnlyWaiter()
	if err != nil {
		// No waiter in the image: this binary, in its keeper role.
		w, exePath, err = readOnlySelf()
		if err != nil {
			return 0, fmt.Errorf("lock keeper: %w", err)
		}
	}
	defer w.Close()
	closed := ^uintptr(0)
	kpid, err := syscall.ForkExec(exePath, []string{roleLockKeeper}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: []uintptr{closed, closed, os.Stderr.Fd(), lock.Fd(), uintptr(pidfd)},
		Sys:   &syscall.SysProcAttr{Setsid: true, Cloneflags: cloneFlags},
	})
	if err != nil {
		return 0, fmt.Errorf("lock keeper: %w", err)
	}
	return kpid, nil
}

// lockKeeperMain holds fd 3 until the pidfd on fd 4 says PID 1 has exited.
func lockKeeperMain() int {
	fds := []unix.PollFd{{Fd: keeperPidFd, Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil {
			return 0
		}
		if !errors.Is(err, unix.EINTR) {
			logx.Errorf("%v", err)
			return 1
		}
	}
}
