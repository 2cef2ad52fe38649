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
	// podConfigFd is where PID 1 reads the pod from the run entry point.
	podConfigFd = 3
	// lockSlotFd is not passed: it held the pod's lock, which leads to
	// the host's pod directory, and PID 1 holds nothing of the host; the
	// lock keeper holds it until PID 1 is gone (startLockKeeper).
	lockSlotFd = 4
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
)

// noFd closes a descriptor's slot in syscall.ProcAttr.Files.
const noFd = ^uintptr(0)

// pid1Files returns the fds run passes to PID 1, indexed by their number
// there; logs are the log and CRI directories, noFd where the pod has none.
func pid1Files(config *os.File, parent int, ready *os.File, logs [2]uintptr) []uintptr {
	files := make([]uintptr, criDirFd+1)
	files[0], files[1], files[2] = os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd()
	files[podConfigFd], files[readyFd] = config.Fd(), ready.Fd()
	files[logDirFd], files[criDirFd] = logs[0], logs[1]
	files[lockSlotFd] = noFd
	files[parentFd] = noFd // not passed: closed in the child
	if parent >= 0 {
		files[parentFd] = uintptr(parent)
	}
	return files
}

// openSelfPidfd returns a pidfd of the calling process for PID 1 to watch,
// or -1 if the kernel has no pidfd_open (PID 1 then relies on
// PR_SET_PDEATHSIG alone).
func openSelfPidfd() int {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return -1
	}
	unix.CloseOnExec(fd)
	return fd
}

// waitReady waits until PID 1 says its signal handling is installed, or is
// dead (EOF).
func waitReady(r *os.File) {
	var b [1]byte
	_, _ = r.Read(b[:])
	r.Close()
}

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
