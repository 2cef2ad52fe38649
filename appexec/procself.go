package appexec

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// privateProc is a procfs instance of this process's own pid namespace,
// mounted detached, once, for its own use: no mount in the app's root can
// cover it (CVE-2025-52881, threats T7), and it shows the calling process,
// which the app's /proc does not once the set-up process has pivoted into
// the app's root (the app's /proc is of the apps' pid namespace, which the
// set-up process is not a member of). -1 where the kernel refuses one.
var privateProc = func() int {
	if privateProcFd == -2 {
		privateProcFd = newPrivateProc()
	}
	return privateProcFd
}

// privateProcFd is privateProc's mount: -2 before it is made.
var privateProcFd = -2

// closePrivateProc closes privateProc's mount, which must not reach the
// app's process: it names every process of the stage1's pid namespace.
func closePrivateProc() {
	if privateProcFd >= 0 {
		unix.Close(privateProcFd)
	}
	privateProcFd = -1
}

func newPrivateProc() int {
	fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1
	}
	return mnt
}

// openProcSelf opens /proc/self/<name> of the calling process through
// privateProc, or through the shared /proc where there is none.
func openProcSelf(name string, flags int) (int, error) {
	if p := privateProc(); p >= 0 {
		return unix.Openat(p, "self/"+name, flags|unix.O_CLOEXEC, 0)
	}
	return unix.Open("/proc/self/"+name, flags|unix.O_CLOEXEC, 0)
}

// reopen opens the file an O_PATH descriptor fd names, with flags.
func reopen(fd, flags int) (int, error) {
	return openProcSelf("fd/"+strconv.Itoa(fd), flags)
}
