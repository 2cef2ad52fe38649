package pid1

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/sigpolicy"
	"github.com/pod1/pod1/stage1-init/handover"
)

// takeHandover is PID 1's first step after installing its signal table:
// every inherited fd becomes close-on-exec, the parent's death becomes a
// forced stop (PR_SET_PDEATHSIG, and the pidfd for a parent that died
// before the prctl or on a kernel where the thread that cloned us is not
// the one that dies last), and run is told that stop requests can come.
func takeHandover(req *sigpolicy.Requests) error {
	if err := handover.CloseOnExecFrom3(); err != nil {
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
	ready := os.NewFile(handover.ReadyFd, "ready")
	if ready == nil {
		return errors.New("ready pipe: not passed")
	}
	_, err := ready.Write([]byte{handover.ReadyByte})
	ready.Close()
	if err != nil && !errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("ready pipe: %w", err)
	}
	return nil
}

// watchParent raises a forced stop when the pidfd of run on handover.ParentFd
// becomes readable (run has exited). It waits in the runtime's poller, so
// it costs no thread.
func watchParent(req *sigpolicy.Requests) error {
	var st unix.Stat_t
	if err := unix.Fstat(handover.ParentFd, &st); err != nil {
		return nil // not passed: PR_SET_PDEATHSIG alone
	}
	if err := unix.SetNonblock(handover.ParentFd, true); err != nil {
		return fmt.Errorf("parent pidfd: %w", err)
	}
	f := os.NewFile(handover.ParentFd, "parent-pidfd")
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

// commitPipe returns the commit pipe's write end (handover.CommitFd), non-blocking:
// PID 1 never waits on the keeper. It is -1 if run passed none.
func commitPipe() int {
	var st unix.Stat_t
	if unix.Fstat(handover.CommitFd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return -1
	}
	if unix.SetNonblock(handover.CommitFd, true) != nil {
		return -1
	}
	return handover.CommitFd
}
