// Package selfexe runs the stage1's binaries, its own and those next to
// it, from detached read-only copies: a process started from one has a
// /proc/PID/exe that leads nowhere writable.
package selfexe

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// SelfDir is a detached, read-only copy of the directory holding our own
// binary (not its subdirectories' mounts), and the binary's name in it.
type SelfDir struct {
	Dir  *os.File
	Name string
}

// OpenSelfDir makes the copy and checks that name in it is the very file
// we run.
func OpenSelfDir() (*SelfDir, error) {
	p, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("stage1 binary: %w", err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Dir(p), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("stage1 directory: open_tree: %w", err)
	}
	d := &SelfDir{Dir: os.NewFile(uintptr(fd), "stage1-dir"), Name: filepath.Base(p)}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		d.Dir.Close()
		return nil, fmt.Errorf("stage1 directory: mount_setattr: %w", err)
	}
	var self, there unix.Stat_t
	err = unix.Stat("/proc/self/exe", &self)
	if err == nil {
		err = unix.Fstatat(fd, d.Name, &there, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil && (self.Dev != there.Dev || self.Ino != there.Ino) {
		err = fmt.Errorf("%s is no longer the binary we run", p)
	}
	if err != nil {
		d.Dir.Close()
		return nil, fmt.Errorf("stage1 binary: %w", err)
	}
	return d, nil
}

// ReadOnlySibling opens the binary name next to our own as a detached,
// read-only mount of that one file, and returns its descriptor, which the
// caller closes, and the path that executes it while the descriptor is
// open, in a child started with files (ExecFd).
//
// The binaries are the pod's stage1/rootfs/ ones, which rkt's gc
// later runs as host root (threats G3, T3). A process started from this
// copy has a /proc/PID/exe that leads only there: opening it for writing,
// or reopening an O_PATH descriptor of it, fails with EROFS, during the
// pod's life and after it, whoever holds the descriptor (CVE-2019-5736,
// where a process re-executing the runtime rewrote it through that link).
func ReadOnlySibling(name string, files []uintptr) (int, string, error) {
	tree, err := ReadOnlyTree(name)
	if err != nil {
		return -1, "", err
	}
	high, err := ExecFd(tree, files)
	unix.Close(tree)
	if err != nil {
		return -1, "", err
	}
	return high, "/proc/self/fd/" + strconv.Itoa(high), nil
}

// ReadOnlyTree opens the binary name next to our own as a detached,
// read-only mount of that one file, and returns its descriptor, which the
// caller closes.
func ReadOnlyTree(name string) (int, error) {
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return -1, fmt.Errorf("%s: %w", name, err)
	}
	p := filepath.Join(filepath.Dir(self), name)
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", p, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	var st unix.Stat_t
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: mount_setattr: %w", p, err)
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: not a regular file", p)
	}
	return fd, nil
}
