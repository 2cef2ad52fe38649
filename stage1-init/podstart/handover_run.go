package podstart

import (
	"os"

	"github.com/pod1/pod1/stage1-init/handover"
	"golang.org/x/sys/unix"
)

// closeFds closes each fd of fds but handover.NoFd.
func closeFds(fds []uintptr) {
	for _, fd := range fds {
		if fd != handover.NoFd {
			unix.Close(int(fd))
		}
	}
}

// pid1Files returns the fds run passes to PID 1, indexed by their number
// there; logs are the log and CRI directories, handover.NoFd where the pod has none;
// commit is the write end of the lock keeper's commit pipe.
func pid1Files(config *os.File, parent int, ready *os.File, logs [2]uintptr, commit int, pause *os.File) []uintptr {
	f := handover.PID1Files{
		Stdin: os.Stdin.Fd(), Stdout: os.Stdout.Fd(), Stderr: os.Stderr.Fd(),
		Config: config.Fd(), Parent: handover.NoFd, Ready: ready.Fd(),
		LogDir: logs[0], CRIDir: logs[1], Commit: uintptr(commit), PauseExe: pause.Fd(),
	}
	if parent >= 0 {
		f.Parent = uintptr(parent)
	}
	return f.Files()
}

// waitReady waits until PID 1 says its signal handling is installed, or is
// dead (EOF).
func waitReady(r *os.File) {
	var b [1]byte
	_, _ = r.Read(b[:])
	r.Close()
}
