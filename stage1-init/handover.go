package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/sigpolicy"
)

// What run hands PID 1 besides its stdio, at fixed fd numbers. PID 1 marks
// them all close-on-exec first thing: no process it starts inherits one.
const (
	// podConfigFd is where PID 1 reads the pod from the run entry point:
	// its configuration (JSON), then hostReady, then the pipe's end.
	podConfigFd = 3
	// 4 is not passed (lockSlotFd, handover_run.go).
	// parentFd is a pidfd of the run process, readable once run is
	// dead; -1 (not passed) on kernels without pidfd_open.
	parentFd = 5
	// readyFd is the write end of a pipe on which PID 1 says its
	// signal handling is installed; run names PID 1 in the pid file
	// (which is how stop finds it) and passes stop requests on only
	// after that, so no stop reaches PID 1 while the Go runtime's
	// defaults would exit or drop it.
	readyFd = 6
	// logDirFd and criDirFd are the pod's log directory and the CRI log
	// directory (openLogSinks), when the pod writes there: PID 1 writes
	// its log files through them, never through a path. Each is a
	// detached copy of the directory, from which ".." leads nowhere.
	logDirFd = 7
	criDirFd = 8
	// commitFd is the write end of the lock keeper's commit pipe: an
	// app's name on it, a line, says its final status waits for the
	// keeper's commit (appOS.WriteStatus).
	commitFd = 9
	// pauseExeFd is pod1-pause, the init of the apps' pid namespace: a
	// detached read-only mount of the file next to run's binary (a
	// process started from it has a /proc/PID/exe that leads nowhere
	// writable, as for every stage1 process).
	pauseExeFd = 10
)

// hostReady follows the pod's configuration on podConfigFd once run has
// placed PID 1 in the pod's cgroups, the host's last step before the pod
// may start apps. PID 1 sets itself up from its configuration meanwhile,
// and starts no app before it has read this and the pipe's end: a pipe
// that ends without it (run failed, and kills PID 1, or died) ends the
// pod before anything starts.
const hostReady = "host ready\n"

// takeHandover is PID 1's first step after installing its signal table:
// every inherited fd becomes close-on-exec, the parent's death becomes a
// forced stop (PR_SET_PDEATHSIG, and the pidfd for a parent that died
// before the prctl or on a kernel where the thread that cloned us is not
// the one that dies last), and run is told that stop requests can come.
func takeHandover(req *sigpolicy.Requests) error {
	if err := closeOnExecFrom3(); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	// Sent when the thread of run that cloned us exits; run keeps that
	// thread until it returns. A pid namespace's init drops a signal it
	// has no handler for, so this must come after sigpolicy.Listen.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sigpolicy.Forward(sigpolicy.ForceStop)), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl pdeathsig: %w", err)
	}
	if err := watchParent(req); err != nil {
		return err
	}
	ready := os.NewFile(readyFd, "ready")
	if ready == nil {
		return errors.New("ready pipe: not passed")
	}
	_, err := ready.Write([]byte{1})
	ready.Close()
	if err != nil && !errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("ready pipe: %w", err)
	}
	return nil
}

// watchParent raises a forced stop when the pidfd of run on parentFd
// becomes readable (run has exited). It waits in the runtime's poller, so
// it costs no thread.
func watchParent(req *sigpolicy.Requests) error {
	var st unix.Stat_t
	if err := unix.Fstat(parentFd, &st); err != nil {
		return nil // not passed: PR_SET_PDEATHSIG alone
	}
	if err := unix.SetNonblock(parentFd, true); err != nil {
		return fmt.Errorf("parent pidfd: %w", err)
	}
	f := os.NewFile(parentFd, "parent-pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("parent pidfd: %w", err)
	}
	go func() {
		// The callback reports whether run is gone; until it is,
		// Read waits for the pidfd to become readable.
		_ = rc.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(p, 0)
			return err == nil && n > 0 && p[0].Revents&unix.POLLIN != 0
		})
		req.Raise(sigpolicy.ForceStop, "the run process died")
		_ = f.Close()
	}()
	return nil
}

// closeOnExecFrom3 marks every inherited fd above stderr close-on-exec, so
// whatever stage0 (or anyone before it) left open never reaches a child
// (threats T1).
func closeOnExecFrom3() error {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}

// commitPipe returns the commit pipe's write end (commitFd), non-blocking:
// PID 1 never waits on the keeper. It is -1 if run passed none.
func commitPipe() int {
	var st unix.Stat_t
	if unix.Fstat(commitFd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return -1
	}
	if unix.SetNonblock(commitFd, true) != nil {
		return -1
	}
	return commitFd
}
