package appexec

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// PodShm is where PID 1's root holds, read-only, the pod's /dev/shm: one
// tmpfs every app of the pod gets a copy of (rkt's stage1 bound one
// pod-wide /dev/shm into every app). PID 1 keeps it in its own root, which
// no app can reach, so an app reaches the pod's /dev/shm through its own
// /dev/shm only, and a volume covering that leaves it none.
const PodShm = "/pod1-shm"

// podShmFd, when not -1, is a detached copy of the pod's /dev/shm handed
// to this process (a spare, started before PID 1 had PodShm).
var podShmFd = -1

// mountPodShm attaches a copy of the pod's /dev/shm at target, the /dev/shm
// directory of the app's fresh /dev.
func mountPodShm(root *os.File, target string) error {
	d, err := openInRoot(root, target)
	if err != nil {
		return err
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", target)
	}
	src := podShmFd
	if src >= 0 {
		podShmFd = -1
	} else if src, err = unix.OpenTree(unix.AT_FDCWD, PodShm, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC); err != nil {
		return fmt.Errorf("the pod's /dev/shm: %w", err)
	}
	defer unix.Close(src)
	// PID 1's copy is read-only; the app's is writable, and never a
	// place to run a binary or a device from.
	attr := unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC,
		Attr_clr: unix.MOUNT_ATTR_RDONLY,
	}
	if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("the pod's /dev/shm: mount_setattr: %w", err)
	}
	return unix.MoveMount(src, "", int(d.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// dropPodShm closes the pod's /dev/shm handed to a spare whose app did
// not take it (a volume covers its /dev/shm).
func dropPodShm() {
	if podShmFd >= 0 {
		unix.Close(podShmFd)
		podShmFd = -1
	}
}
