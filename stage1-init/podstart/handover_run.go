package podstart

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/stage1-init/handover"
)

// closeFds closes each fd of fds but handover.NoFd.
func closeFds(fds []uintptr) {
	for _, fd := range fds {
		if fd != handover.NoFd {
			unix.Close(int(fd))
		}
	}
}

// waitReady waits until PID 1 says its signal handling is installed (a
// handover.ReadyByte on r), or is dead (EOF).
func waitReady(r int) {
	var b [1]byte
	for {
		if _, err := unix.Read(r, b[:]); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
