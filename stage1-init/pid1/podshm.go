package pid1

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
)

// makePodShm makes the pod's /dev/shm, one tmpfs for all its apps, and
// returns two detached copies of it: one for the spare's brief, one for
// PID 1's root (attachPodShm), from which every later app's set-up clones
// its own. size is its bound in bytes, 0 for tmpfs's default (half of
// the host's memory, what rkt's stage1 gave its pods). It lives only in
// the pod's mount namespaces: on the host there is nothing to clean, and
// it is gone with the last of them.
//
// A tmpfs must be attached to be cloned (open_tree refuses a detached
// mount before Linux 6.15), so it is mounted for a moment on
// ownRootBase, in PID 1's copy of the host's mounts, which podenv.Setup
// made slaves: nothing of it reaches the host.
func makePodShm(size int64) ([2]int, error) {
	fds := [2]int{-1, -1}
	data := "mode=1777"
	if size > 0 {
		data += ",size=" + strconv.FormatInt(size, 10)
	}
	if err := unix.Mount("tmpfs", ownRootBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		return fds, fmt.Errorf("the pod's /dev/shm: mount tmpfs (%s): %w", data, err)
	}
	var err error
	for i := range fds {
		if fds[i], err = unix.OpenTree(unix.AT_FDCWD, ownRootBase, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC); err != nil {
			break
		}
	}
	err = errors.Join(err, unix.Unmount(ownRootBase, unix.MNT_DETACH))
	if err != nil {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		return [2]int{-1, -1}, fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	return fds, nil
}

// attachPodShm puts shm, a detached copy of the pod's /dev/shm, at
// appexec.PodShm under root, read-only: PID 1 never writes there.
func attachPodShm(root string, shm int) error {
	defer unix.Close(shm)
	dst := root + appexec.PodShm
	if err := unix.Mkdir(dst, 0o555); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(shm, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	return unix.MoveMount(shm, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}
