package entry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/podpid"
	"github.com/pod1/pod1/podspec"
)

// exposeAddedSources makes the volume sources of an app being added to a
// running mutable pod reachable in PID 1's own root (enterOwnRoot), at
// the paths the app's spec names, when they are not already there: the
// app/add entry point, host root on the host, clones each source and
// attaches the copy inside PID 1's mount namespace.
func exposeAddedSources(raw json.RawMessage) error {
	var a podspec.App
	if err := json.Unmarshal(raw, &a); err != nil {
		return err
	}
	var srcs []appexec.Mount
	for _, m := range a.Spec.Mounts {
		if m.Kind == appexec.KindBind && filepath.IsAbs(m.Source) {
			srcs = append(srcs, m)
		}
	}
	if len(srcs) == 0 {
		return nil
	}
	pid1, err := podpid.Open(".")
	if err != nil {
		return fmt.Errorf("the pod's PID 1: %w", err)
	}
	defer pid1.Close()
	pidfd := pid1.Fd()
	trees := make([]int, len(srcs))
	defer func() {
		for _, fd := range trees {
			if fd > 0 {
				unix.Close(fd)
			}
		}
	}()
	for i, m := range srcs {
		fd, err := cloneSource(filepath.Clean(m.Source))
		if err != nil {
			if m.Optional && errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("volume source %s: %w", m.Source, err)
		}
		trees[i] = fd
	}
	// The namespace is joined by one thread, which then ends with its
	// goroutine: it never runs anything else.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- attachInPID1Root(pidfd, srcs, trees)
	}()
	return <-errc
}

// cloneSource makes a detached copy of the volume source at path, as PID
// 1's own root holds those of the apps it started with (pid1's
// cloneTree).
func cloneSource(path string) (int, error) {
	return unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
}

// attachInPID1Root runs on a thread of its own: it joins PID 1's mount
// namespace (its root becomes PID 1's) and attaches each tree not
// already there, creating its mount point in PID 1's read-only tmpfs,
// which is writable only meanwhile. The mount point is reached without
// following any symlink.
func attachInPID1Root(pidfd int, srcs []appexec.Mount, trees []int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs: %w", err)
	}
	if err := unix.Setns(pidfd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("join PID 1's mount namespace: %w", err)
	}
	for i, m := range srcs {
		if trees[i] <= 0 {
			continue
		}
		p := filepath.Clean(m.Source)
		var have, want unix.Stat_t
		if unix.Fstat(trees[i], &want) == nil && unix.Lstat(p, &have) == nil && have.Dev == want.Dev && have.Ino == want.Ino {
			continue
		}
		if err := makeMountPoint(p, m.File); err != nil {
			return fmt.Errorf("volume source %s: %w", p, err)
		}
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
		t, err := unix.Openat2(unix.AT_FDCWD, p, &how)
		if err != nil {
			return fmt.Errorf("volume source %s: mount point: %w", p, err)
		}
		err = unix.MoveMount(trees[i], "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(t)
		if err != nil {
			return fmt.Errorf("volume source %s: attach: %w", p, err)
		}
	}
	return nil
}

// makeMountPoint creates p (a directory, or an empty file) in PID 1's
// root, lifting the read-only flag of its tmpfs meanwhile.
func makeMountPoint(p string, file bool) error {
	rw := unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}
	ro := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &rw); err != nil {
		return err
	}
	defer func() { _ = unix.MountSetattr(unix.AT_FDCWD, "/", 0, &ro) }()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if file {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}
