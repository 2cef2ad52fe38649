package appexec

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// mountConsolePts puts a copy of the console's devpts instance, which PID
// 1 holds at ConsolePts in its root, on the directory name of dir (the
// app's /dev/pts). The set-up of a console app is forked from PID 1 after
// its pivot (never the spare, whose mount namespace is older), so the
// path is PID 1's.
func mountConsolePts(dir int, name string) error {
	src, err := unix.OpenTree(unix.AT_FDCWD, ConsolePts, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("the console's devpts: %w", err)
	}
	defer unix.Close(src)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("the console's devpts: mount_setattr: %w", err)
	}
	return unix.MoveMount(src, "", dir, name, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// reopenConsole opens the app's terminal, which PID 1 gave it as fds 0-2,
// again through the app's own /dev/pts (the same devpts instance: the
// calling process is in the app's root by now), and puts it in place of
// each of fds 0-2 that is that terminal: the name ttyname(3) then finds
// for it is /dev/pts/N, as under rkt's stage1, not a path of PID 1's.
func reopenConsole(s *Spec) error {
	if !s.ConsolePts {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(0, &st); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return nil // not a terminal (stdin was no terminal after all)
	}
	// devpts numbers its terminals from major 136 on, 256 to a major.
	major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
	if major < 136 || major > 143 {
		return nil
	}
	n := (major-136)*256 + minor
	fd, err := unix.Open("/dev/pts/"+strconv.FormatUint(uint64(n), 10), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("console: open /dev/pts/%d: %w", n, err)
	}
	defer unix.Close(fd)
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil || got.Rdev != st.Rdev || got.Dev != st.Dev {
		return fmt.Errorf("console: /dev/pts/%d is not the app's terminal", n)
	}
	for std := 0; std <= 2; std++ {
		var cur unix.Stat_t
		if unix.Fstat(std, &cur) == nil && cur.Rdev == st.Rdev && cur.Dev == st.Dev && cur.Mode&unix.S_IFMT == unix.S_IFCHR {
			if err := unix.Dup3(fd, std, 0); err != nil {
				return fmt.Errorf("console: %w", err)
			}
		}
	}
	return nil
}
