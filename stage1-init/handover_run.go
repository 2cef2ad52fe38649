//go:build !pod1init

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockSlotFd is not passed to PID 1: it held the pod's lock, which leads
// to the host's pod directory, and PID 1 holds nothing of the host; the
// lock keeper holds it until PID 1 is gone (startLockKeeper).
const lockSlotFd = 4

// noFd closes a descriptor's slot in syscall.ProcAttr.Files.
const noFd = ^uintptr(0)

// closeFds closes each fd of fds but noFd.
func closeFds(fds []uintptr) {
	for _, fd := range fds {
		if fd != noFd {
			unix.Close(int(fd))
		}
	}
}

// pid1Files returns the fds run passes to PID 1, indexed by their number
// there; logs are the log and CRI directories, noFd where the pod has none;
// commit is the write end of the lock keeper's commit pipe.
func pid1Files(config *os.File, parent int, ready *os.File, logs [2]uintptr, commit int, pause *os.File) []uintptr {
	files := make([]uintptr, pauseExeFd+1)
	files[commitFd] = uintptr(commit)
	files[pauseExeFd] = pause.Fd()
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

// waitReady waits until PID 1 says its signal handling is installed, or is
// dead (EOF).
func waitReady(r *os.File) {
	var b [1]byte
	_, _ = r.Read(b[:])
	r.Close()
}
