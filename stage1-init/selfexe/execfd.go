package selfexe

import (
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/starttricks"
)

// ExecFd duplicates fd (close-on-exec) to the number a child started by
// syscall.ForkExec with files executes it through, /proc/self/fd/<n>,
// and returns that number. Before its execve the child moves files into
// place through the numbers from one above the highest of len(files) and
// the files' own, one for its error pipe and one for each file at most:
// n is above them all, so that none lands on it. And n is as low as that
// allows: the descriptor table a process starts with holds 64, and
// growing it past that in a process of several threads (every Go
// program) waits for an RCU grace period (the kernel's expand_fdtable),
// which was on every pod's start path with n at 256
// (docs/design-start.md).
func ExecFd(fd int, files []uintptr) (int, error) {
	low := len(files)
	for _, f := range files {
		// A file not passed (^uintptr(0)) is -1, as for ForkExec.
		low = max(low, int(f))
	}
	if !starttricks.On(starttricks.FDTable) {
		// Past the table's first size, as any number would be.
		return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, max(256, low+len(files)+3))
	}
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, low+len(files)+3)
}
