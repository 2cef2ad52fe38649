package podstart

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/stage1-init/handover"
)

// waiter is the Go run's link to the waiter (waiter/waiter.c), the run
// entry point, which started it (handover.WaiterEnv). The waiter is the
// process stage0 exec'd: it holds the lock, receives the stop requests and
// outlives us, and PID 1 and the lock keeper are its children
// (CLONE_PARENT), not ours.
type waiter struct {
	report *os.File
	// done is the write end of the pipe the waiter watches for the
	// lock keeper's end of duty (handover.KeeperDoneFd), -1 once it is the
	// keeper's (takeDone).
	done int
	// pidfd is the waiter's, opened while it was surely our parent:
	// PID 1 watches it, and so learns of the waiter's death even if
	// that came before PID 1 was cloned (CLONE_PARENT then makes the
	// host's init PID 1's parent, whose death never comes).
	pidfd int
	// pid is the waiter's, checked to be our parent's when pidfd was
	// opened: what rkt exec'd, the ancestor of every process of the
	// pod's start (ancestor).
	pid int
}

// ancestor is the waiter's pid, for the cgroup the pod is made in
// (cgroups.NewPod), once the waiter is known to be alive: a run whose
// waiter died is orphaned, and its parent then is the host's init,
// every process's ancestor (which would make the caller's whole unit
// the pod's).
func (w *waiter) ancestor() (int, error) {
	if err := unix.PidfdSendSignal(w.pidfd, 0, nil, 0); err != nil {
		return 0, fmt.Errorf("the waiter (pid %d) is gone: %w", w.pid, err)
	}
	return w.pid, nil
}

// takeWaiter takes the report pipe, the waiter's pid and the keeper's done
// pipe, which the waiter passed, out of the environment (PID 1 gets run's
// environment). Without them we were not started by the waiter, and
// nothing would hold the lock or pass stop requests on once we hand over:
// we refuse to start.
func takeWaiter() (*waiter, error) {
	v, ok := os.LookupEnv(handover.WaiterEnv)
	if !ok {
		return nil, fmt.Errorf("%s: not set: run must be started as the image's run, the waiter (%s)", handover.WaiterEnv, handover.WaiterBinary)
	}
	_ = os.Unsetenv(handover.WaiterEnv)
	fdv, rest, _ := strings.Cut(v, ",")
	pidv, donev, _ := strings.Cut(rest, ",")
	fd, err := strconv.Atoi(fdv)
	if err != nil || fd <= 2 {
		return nil, fmt.Errorf("%s=%q: not a file descriptor above stderr", handover.WaiterEnv, v)
	}
	pid, err := strconv.Atoi(pidv)
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("%s=%q: no waiter pid", handover.WaiterEnv, v)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("%s=%d: not a pipe", handover.WaiterEnv, fd)
	}
	done, err := strconv.Atoi(donev)
	if err != nil || done <= 2 || done == fd || unix.Fstat(done, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("%s=%q: the done pipe is not a pipe above stderr", handover.WaiterEnv, v)
	}
	unix.CloseOnExec(done)
	unix.CloseOnExec(fd)
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err == nil && os.Getppid() != pid {
		unix.Close(pidfd)
		err = errors.New("it is gone")
	}
	if err != nil {
		return nil, fmt.Errorf("the waiter (pid %d): %w", pid, err)
	}
	unix.CloseOnExec(pidfd)
	return &waiter{report: os.NewFile(uintptr(fd), "waiter-report"), pidfd: pidfd, done: done, pid: pid}, nil
}

// takeDone hands the done pipe's write end on, for the lock keeper
// (handover.KeeperDoneFd): the caller owns it from then on. -1 if the
// waiter passed none, or it was taken.
func (w *waiter) takeDone() int {
	d := w.done
	w.done = -1
	return d
}

// pidfdCopy is a copy of the waiter's pidfd, for PID 1 to watch; the
// caller closes it.
func (w *waiter) pidfdCopy() int {
	fd, err := unix.FcntlInt(uintptr(w.pidfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// handOver tells the waiter that PID 1 pid is ready and named in the pid
// file, with the keeper and what is left to undo once PID 1 is gone; the
// waiter does all that from here on. An error means the waiter is gone.
func (w *waiter) handOver(pid, keeper int, podDir string, pod *podspec.Pod) error {
	r := handover.Report{PID1: pid, Keeper: keeper}
	if pod.Mutable {
		r.Stage2 = filepath.Join(podDir, layout.Stage2Dir)
	}
	if pod.Cgroup != nil {
		r.Cgroups = pod.Cgroup.Dirs()
	}
	b, err := r.Encode()
	if err != nil {
		return err
	}
	_, err = w.report.Write(b)
	if cerr := w.report.Close(); err == nil {
		err = cerr
	}
	return err
}

// waitGone waits until PID 1 (pidfd), the waiter's child, has exited: its
// status is the waiter's to read.
func waitGone(pidfd int) {
	p := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(p, -1); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
