//go:build !pod1init

package main

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
)

// waiterFdEnv names, in the Go run's environment, the pipe on which it
// reports to the waiter (waiter/waiter.c) when the waiter is the run entry
// point and started it. The waiter is then the process stage0 exec'd: it
// holds the lock, receives the stop requests and outlives us, and PID 1
// and the lock keeper are its children (CLONE_PARENT), not ours.
const waiterFdEnv = "POD1_WAITER_FD"

// waiter is the Go run's link to the waiter, nil when run is the entry
// point itself.
type waiter struct {
	report *os.File
	// done is the write end of the pipe the waiter watches for the
	// lock keeper's end of duty (its fd 6), -1 if the waiter passed
	// none; it is the keeper's (keeperExtra).
	done int
	// pidfd is the waiter's, opened while it was surely our parent:
	// PID 1 watches it, and so learns of the waiter's death even if
	// that came before PID 1 was cloned (CLONE_PARENT then makes the
	// host's init PID 1's parent, whose death never comes).
	pidfd int
}

// takeWaiter takes the report pipe the waiter passed, if any, out of the
// environment (PID 1 gets run's environment).
func takeWaiter() (*waiter, error) {
	v, ok := os.LookupEnv(waiterFdEnv)
	if !ok {
		return nil, nil
	}
	_ = os.Unsetenv(waiterFdEnv)
	fdv, rest, _ := strings.Cut(v, ",")
	pidv, donev, _ := strings.Cut(rest, ",")
	fd, err := strconv.Atoi(fdv)
	if err != nil || fd <= 2 {
		return nil, fmt.Errorf("%s=%q: not a file descriptor above stderr", waiterFdEnv, v)
	}
	pid, err := strconv.Atoi(pidv)
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("%s=%q: no waiter pid", waiterFdEnv, v)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("%s=%d: not a pipe", waiterFdEnv, fd)
	}
	done := -1
	if donev != "" {
		d, err := strconv.Atoi(donev)
		if err != nil || d <= 2 || d == fd || unix.Fstat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return nil, fmt.Errorf("%s=%q: the done pipe is not a pipe above stderr", waiterFdEnv, v)
		}
		unix.CloseOnExec(d)
		done = d
	}
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
	return &waiter{report: os.NewFile(uintptr(fd), "waiter-report"), pidfd: pidfd, done: done}, nil
}

// keeperExtra is what the lock keeper gets from fd 6 on, under the
// waiter: the done pipe's write end, then copies of the pod's detached log
// directories (logs, as PID 1 gets them; noFd where the pod has none),
// then PID 1's network namespace (pid; noFd if it is ours, or PID 1 could
// not be started: cloneErr). The keeper outlives the waiter
// (waiter.c, done_with_lock), and the last close of each of these is
// dear: a detached mount's teardown (an expedited RCU grace period,
// 0.1-4.6 ms traced in PID 1's end), a network namespace's (deferred work
// that took a CPU from the waiter's exit and its caller's wake-up on this
// 2-CPU host). Held by the keeper too, that comes after the pod's end.
// Without the waiter's done pipe it is nil: the Go run waits for the
// keeper's exit, which would then pay for it. The caller closes what it
// returns once the keeper has its copies.
func (w *waiter) keeperExtra(logs [2]uintptr, pid int, cloneErr error) []uintptr {
	if w == nil || w.done < 0 {
		return nil
	}
	extra := []uintptr{uintptr(w.done), noFd, noFd, noFd}
	w.done = -1
	for i, fd := range logs {
		if fd == noFd {
			continue
		}
		if d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 3); err == nil {
			extra[1+i] = uintptr(d)
		}
	}
	if cloneErr == nil {
		if fd := podNetnsFd(pid); fd >= 0 {
			extra[3] = uintptr(fd)
		}
	}
	return extra
}

// cloneFlags adds what the children run starts need under the waiter: the
// waiter as their parent.
func (w *waiter) cloneFlags() uintptr {
	if w == nil {
		return 0
	}
	return unix.CLONE_PARENT
}

// parentPidfd is the pidfd PID 1 watches: the waiter's, or run's; the
// caller closes it.
func (w *waiter) parentPidfd() int {
	if w == nil {
		return openSelfPidfd()
	}
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
	stage2 := "-"
	if pod.Mutable {
		stage2 = filepath.Join(podDir, layout.Stage2Dir)
	}
	fields := []string{strconv.Itoa(pid), strconv.Itoa(keeper), stage2}
	if pod.Cgroup != nil {
		fields = append(fields, pod.Cgroup.Dirs()...)
	}
	var b strings.Builder
	for _, f := range fields {
		if strings.IndexByte(f, 0) >= 0 {
			return errors.New("waiter report: a NUL in a path")
		}
		b.WriteString(f)
		b.WriteByte(0)
	}
	_, err := w.report.WriteString(b.String())
	if cerr := w.report.Close(); err == nil {
		err = cerr
	}
	return err
}

// waitGone waits until PID 1 (pidfd) has exited when it is not our child
// (under the waiter, which reaps it): its status is the waiter's to read.
func waitGone(pidfd int) {
	p := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(p, -1); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// waiterBinary is the waiter's binary (waiter/waiter.c), next to ours; it
// is also the lock keeper (startLockKeeper).
const waiterBinary = "pod1-waiter"
