package podstart

import (
	"os"

	"github.com/pod1/pod1/stage1-init/handover"
	"golang.org/x/sys/unix"
)

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
	files := make([]uintptr, handover.PauseExeFd+1)
	files[handover.CommitFd] = uintptr(commit)
	files[handover.PauseExeFd] = pause.Fd()
	files[0], files[1], files[2] = os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd()
	files[handover.ConfigFd], files[handover.ReadyFd] = config.Fd(), ready.Fd()
	files[handover.LogDirFd], files[handover.CRIDirFd] = logs[0], logs[1]
	files[handover.LockSlotFd] = noFd
	files[handover.ParentFd] = noFd // not passed: closed in the child
	if parent >= 0 {
		files[handover.ParentFd] = uintptr(parent)
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
