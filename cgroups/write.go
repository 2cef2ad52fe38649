package cgroups

import (
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// writeFile writes b to an existing cgroup file in one write(2), the unit
// in which the kernel takes a cgroup command. Unlike os.WriteFile it does
// not register the file with the Go poller (kernfs files are pollable, so
// os.OpenFile adds an epoll_ctl pair and three fcntl calls to every
// write); these writes are on the path of every app's start.
func writeFile(path string, b []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return writeFd(fd, path, b)
}

// writeFd writes b to fd, an open cgroup file, in one write(2).
func writeFd(fd int, path string, b []byte) error {
	for {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		if n != len(b) {
			return &os.PathError{Op: "write", Path: path, Err: unix.EIO}
		}
		return nil
	}
}

// readFile reads a small cgroup file whole, as writeFile writes one, for the
// same reason. Process lists and event counters are read at every app's end.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 512)
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}
