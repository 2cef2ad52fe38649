package appexec

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket activation (stage1-init and package sockact match the sockets
// systemd passed rkt run to the apps' socket-activated ports).
//
// An app's set-up process holds the app's sockets from ListenFd on, in the
// order the app gets them (Spec.Listen names them). Launch moves them to
// fds 3.. of the app's process, which is how systemd hands sockets to a
// service, after its gate and right before its execve, and gives it
// LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID: the last is the process's
// own pid as it sees it, in the apps' pid namespace, which only the
// process itself knows once it is cloned, so it writes the number into
// its environment there (putPid). An app checks LISTEN_PID against its
// own pid (sd_listen_fds), so a number of any other namespace would make
// it ignore its sockets.

// ListenFd is where an app's set-up process holds the first of the app's
// sockets; the others follow it.
const ListenFd = CgroupNSFd + 1

// MaxListen bounds the sockets one app gets.
const MaxListen = 256

// listenPidVar is LISTEN_PID's entry in the environment as prepared,
// its number a placeholder of listenPidDigits digits the app's process
// overwrites (its NUL included).
const (
	listenPidDigits = 10
	listenPidVar    = "LISTEN_PID=0000000000"
)

// listenEnv returns env for an app's process that gets the sockets names:
// whatever LISTEN_* variables env has dropped (an image's would hide
// ours: a program takes the first of a name), then LISTEN_FDS,
// LISTEN_FDNAMES and, last, LISTEN_PID's placeholder (listenPid finds it
// there).
func listenEnv(env, names []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "LISTEN_FDS", "LISTEN_FDNAMES", "LISTEN_PID":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LISTEN_FDS="+strconv.Itoa(len(names)), "LISTEN_FDNAMES="+strings.Join(names, ":"), listenPidVar)
}

// listenPid returns where the number of the last variable of the
// prepared environment x.envv, LISTEN_PID's placeholder, starts.
func listenPid(x *preparedExec) *[listenPidDigits + 1]byte {
	p := x.envv[len(x.envv)-2] // the last is execve's NULL
	return (*[listenPidDigits + 1]byte)(unsafe.Add(unsafe.Pointer(p), len("LISTEN_PID=")))
}

// takeListen prepares the move of n sockets from ListenFd on to fds 3..
// in the process launchFinal clones: errFd, the clone's error pipe, and
// copies of the sockets go above 3+n-1 and above the gate, so that the
// moves, made in order after the gate, overwrite neither a socket not yet
// moved nor the pipe. It returns the pipe's new number, and the copies
// (close-on-exec: they go at execve) in the order the app gets them.
func takeListen(n, errFd int) (int, []int32, error) {
	if n == 0 {
		return errFd, nil, nil
	}
	if n > MaxListen {
		return errFd, nil, fmt.Errorf("socket activation: %d sockets, at most %d", n, MaxListen)
	}
	moved, err := unix.FcntlInt(uintptr(errFd), unix.F_DUPFD_CLOEXEC, max(GateFd+1, 3+n))
	if err != nil {
		return errFd, nil, fmt.Errorf("socket activation: %w", err)
	}
	unix.Close(errFd)
	srcs := make([]int32, 0, n)
	for i := range n {
		var st unix.Stat_t
		if err := unix.Fstat(ListenFd+i, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return moved, nil, fmt.Errorf("socket activation: socket %d of %d was not passed", i+1, n)
		}
		// Each copy is above the pipe and the copies before it.
		fd, err := unix.FcntlInt(uintptr(ListenFd+i), unix.F_DUPFD_CLOEXEC, moved+1)
		if err != nil {
			return moved, nil, fmt.Errorf("socket activation: %w", err)
		}
		srcs = append(srcs, int32(fd))
	}
	return moved, srcs, nil
}

// putPid writes pid in decimal, NUL-ended, into b. It runs in the cloned
// process, before its execve, where nothing of the Go runtime may run.
//
//go:nosplit
//go:norace
func putPid(b *[listenPidDigits + 1]byte, pid uintptr) {
	n := 1
	for v := pid; v >= 10 && n < listenPidDigits; v /= 10 {
		n++
	}
	for i := n - 1; i >= 0; i-- {
		b[i] = byte('0' + pid%10)
		pid /= 10
	}
	b[n] = 0
}
