package podstart

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// takeLockFD validates the lock rkt's stage0 hands over in RKT_LOCK_FD: an
// open directory fd on the pod directory holding flock(LOCK_EX). Running
// without it would let `rkt gc` take a live pod for an exited one and
// delete it (threats B19, G1, G2). The fd is kept for the pod's whole life
// with FD_CLOEXEC set, so no process we start inherits it.
func takeLockFD(v, podDir string) (*os.File, error) {
	if v == "" {
		return nil, errors.New("RKT_LOCK_FD: not set; the run entry point must be started by rkt or pod1 run")
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		return nil, fmt.Errorf("RKT_LOCK_FD=%q: not a file descriptor number", v)
	}
	// fds 0-2 go to the apps as their stdio: a lock there would hand
	// every app an fd on the pod directory, and the stage1's files
	// through it.
	if fd <= 2 {
		return nil, fmt.Errorf("RKT_LOCK_FD=%d: fds 0-2 are stdin, stdout and stderr, not a lock", fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("RKT_LOCK_FD: fd %d is not open: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("RKT_LOCK_FD: fd %d is not a directory", fd)
	}
	var pst unix.Stat_t
	if err := unix.Stat(podDir, &pst); err != nil {
		return nil, fmt.Errorf("pod directory %s: %w", podDir, err)
	}
	if st.Dev != pst.Dev || st.Ino != pst.Ino {
		return nil, fmt.Errorf("RKT_LOCK_FD: fd %d is not the pod directory %s", fd, podDir)
	}
	// A second open file description of the same directory can take a
	// shared lock only if nobody holds the exclusive one.
	probe, err := unix.Open(podDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pod directory %s: %w", podDir, err)
	}
	err = unix.Flock(probe, unix.LOCK_SH|unix.LOCK_NB)
	unix.Close(probe)
	if err == nil {
		return nil, fmt.Errorf("RKT_LOCK_FD: fd %d is not locked", fd)
	}
	// Succeeds (as a no-op) only if the exclusive lock is ours.
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("RKT_LOCK_FD: the pod directory is locked, but not through fd %d", fd)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "rkt-lock"), nil
}
