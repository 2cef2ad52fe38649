//go:build !pod1init

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/status"
	"golang.org/x/sys/unix"
)

// roleLockKeeper is the process that holds the pod's lock for PID 1.
const roleLockKeeper = "pod1-lock"

// The lock keeper's fds: the lock (an fd of the pod directory), a pidfd of
// PID 1, the read end of the commit pipe; under the waiter, from fd 6 on,
// the write end of its done pipe, the pod's log directories and PID 1's
// network namespace (waiter.keeperExtra: only the C keeper gets them,
// which this Go keeper, run only without the waiter, never is).
const (
	keeperLockFd   = 3
	keeperPidFd    = 4
	keeperCommitFd = 5
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
// startLockKeeper starts it (the waiter's binary, or this one when the
// image has no waiter) for PID 1's pidfd and the commit pipe's read end,
// with extra from fd 6 on (waiter.keeperExtra) and cloneFlags (the
// waiter's CLONE_PARENT), and returns its pid. Its argument is the
// status directory, below the pod directory.
func startLockKeeper(lock *os.File, pidfd, commit int, extra []uintptr, cloneFlags uintptr) (int, error) {
	// The waiter's binary in its keeper role, when it is there: a C
	// program that only waits holds next to nothing, where a Go runtime
	// holds megabytes for the pod's whole life.
	closed := ^uintptr(0)
	files := append([]uintptr{closed, closed, os.Stderr.Fd(), lock.Fd(), uintptr(pidfd), uintptr(commit)}, extra...)
	w, exePath, err := readOnlyWaiter(files)
	if err != nil {
		// No waiter in the image: this binary, in its keeper role.
		w, exePath, err = readOnlySelf(files)
		if err != nil {
			return 0, fmt.Errorf("lock keeper: %w", err)
		}
	}
	defer w.Close()
	kpid, err := syscall.ForkExec(exePath, []string{roleLockKeeper, layout.StatusDir}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true, Cloneflags: cloneFlags},
	})
	if err != nil {
		return 0, fmt.Errorf("lock keeper: %w", err)
	}
	return kpid, nil
}

// lockKeeperMain holds fd 3 until the pidfd on fd 4 says PID 1 has exited,
// committing the pending final statuses of the apps PID 1 names on the
// commit pipe on fd 5 as it reads them, and what is left in the pipe
// before it exits.
func lockKeeperMain() int {
	statusDir := layout.StatusDir
	if len(os.Args) > 1 {
		statusDir = os.Args[1]
	}
	fds := []unix.PollFd{{Fd: keeperPidFd, Events: unix.POLLIN}, {Fd: keeperCommitFd, Events: unix.POLLIN}}
	var st unix.Stat_t
	if unix.Fstat(keeperCommitFd, &st) != nil || unix.SetNonblock(keeperCommitFd, true) != nil {
		fds = fds[:1] // no commit pipe: PID 1 commits its statuses
	}
	k := &keeper{dir: statusDir, pipe: len(fds) == 2}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			logx.Errorf("lock keeper: %v", err)
			k.commit()
			return 1
		}
		if fds[0].Revents != 0 {
			k.commit()
			return 0
		}
		if len(fds) == 2 && fds[1].Revents != 0 {
			// Read to its end, or PID 1 closed its end (it is
			// ending): either way only its exit may be left.
			if !k.commit() {
				fds = fds[:1]
			}
		}
	}
}

// keeper is the lock keeper's commit state: the status directory, and
// the names read so far from the commit pipe.
type keeper struct {
	dir    string
	pipe   bool
	lines  status.PendingLines
	warned bool
}

// commit reads what the commit pipe holds and commits the apps it names;
// it reports whether the pipe may still bring more.
func (k *keeper) commit() bool {
	if !k.pipe {
		return false
	}
	var apps []string
	var buf [4096]byte
	for !k.lines.Full() {
		n, err := unix.Read(keeperCommitFd, buf[:])
		if n > 0 {
			apps = append(apps, k.lines.Feed(buf[:n])...)
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// Empty (EAGAIN) for now; at its end (0) or broken, for good.
		k.pipe = errors.Is(err, unix.EAGAIN)
		break
	}
	if k.lines.Full() {
		k.pipe = false
	}
	if k.lines.Dropped > 0 && !k.warned {
		k.warned = true
		logx.Warnf("lock keeper: commit pipe: a line that names no app, or one too many, dropped")
	}
	if len(apps) > 0 {
		if err := commitStatuses(k.dir, apps); err != nil {
			logx.Warnf("lock keeper: %v", err)
		}
	}
	return k.pipe
}

// commitStatuses commits the pending final statuses of apps in the status
// directory rel, below the pod directory on the lock's fd, reached without
// following a symlink.
func commitStatuses(rel string, apps []string) error {
	fd, err := unix.Openat2(keeperLockFd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) {
		return nil // the pod never got as far as a status directory
	}
	if err != nil {
		return fmt.Errorf("status directory: %w", err)
	}
	defer unix.Close(fd)
	_, err = status.CommitPending(fd, apps)
	return err
}
