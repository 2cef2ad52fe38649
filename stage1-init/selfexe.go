//go:build !pod1init

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// selfDir is a detached, read-only copy of the directory holding our own
// binary (not its subdirectories' mounts), and the binary's name in it.
type selfDir struct {
	dir  *os.File
	name string
}

// openSelfDir makes the copy and checks that name in it is the very file
// we run.
func openSelfDir() (*selfDir, error) {
	p, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("stage1 binary: %w", err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Dir(p), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("stage1 directory: open_tree: %w", err)
	}
	d := &selfDir{dir: os.NewFile(uintptr(fd), "stage1-dir"), name: filepath.Base(p)}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		d.dir.Close()
		return nil, fmt.Errorf("stage1 directory: mount_setattr: %w", err)
	}
	var self, there unix.Stat_t
	err = unix.Stat("/proc/self/exe", &self)
	if err == nil {
		err = unix.Fstatat(fd, d.name, &there, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil && (self.Dev != there.Dev || self.Ino != there.Ino) {
		err = fmt.Errorf("%s is no longer the binary we run", p)
	}
	if err != nil {
		d.dir.Close()
		return nil, fmt.Errorf("stage1 binary: %w", err)
	}
	return d, nil
}

// readOnlySibling opens the binary name next to our own as a detached,
// read-only mount of that one file, and returns the path that executes it
// while the file is open, in a child started with files (execFd).
//
// The binaries are the pod's stage1/rootfs/ ones, which rkt's gc
// later runs as host root (threats G3, T3). A process started from this
// copy has a /proc/PID/exe that leads only there: opening it for writing,
// or reopening an O_PATH descriptor of it, fails with EROFS, during the
// pod's life and after it, whoever holds the descriptor (CVE-2019-5736,
// where a process re-executing the runtime rewrote it through that link).
func readOnlySibling(name string, files []uintptr) (*os.File, string, error) {
	tree, err := readOnlyTree(name)
	if err != nil {
		return nil, "", err
	}
	high, err := execFd(int(tree.Fd()), files)
	tree.Close()
	if err != nil {
		return nil, "", err
	}
	return os.NewFile(uintptr(high), name), "/proc/self/fd/" + strconv.Itoa(high), nil
}

// readOnlyTree opens the binary name next to our own as a detached,
// read-only mount of that one file.
func readOnlyTree(name string) (*os.File, error) {
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := filepath.Join(filepath.Dir(self), name)
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	var st unix.Stat_t
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: mount_setattr: %w", p, err)
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// pauseBinaryName is pod1-pause, next to ours (PID 1 starts it).
const pauseBinaryName = "pod1-pause"

// initBinary is the start-path binary next to ours (this package built
// with the tag pod1init): the pod's PID 1 and the apps' first processes.
const initBinary = "pod1-init"
