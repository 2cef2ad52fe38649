package appexec

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// openInRoot opens p as an O_PATH handle, resolved inside root: the
// kernel's openat2 with RESOLVE_IN_ROOT, which walks every component and
// symlink of the image as if root were "/" and retries (EAGAIN) when a
// rename elsewhere may have let a ".." escape; and no magic link
// (/proc/self/fd/..., /proc/*/root), through which an image's symlink
// could leave it. pathrs-lite's OpenatInRoot makes the same call and
// then, to name its handle, checks the host's procfs and reads the
// handle's path there: ten more system calls a lookup, a third of an app
// set-up's (docs/design-start.md). Nothing here uses the name.
func openInRoot(root *os.File, p string) (*os.File, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	var err error
	for range 32 {
		var fd int
		fd, err = unix.Openat2(int(root.Fd()), p, how)
		if err == nil {
			return os.NewFile(uintptr(fd), p), nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	return nil, &os.PathError{Op: "openat2 in root", Path: p, Err: err}
}

// dirInRoot opens the directory p inside root, making it and its missing
// parents (0755) if need be. Where it exists, as where most mount targets
// do, one openat2 finds it; otherwise mkdirInRoot makes the missing part.
func dirInRoot(root *os.File, p string) (*os.File, error) {
	f, err := openInRoot(root, p)
	if err == nil {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return f, nil
		}
		f.Close()
		return nil, &os.PathError{Op: "open in root", Path: p, Err: unix.ENOTDIR}
	}
	return mkdirInRoot(root, p)
}

// maxLinks bounds the symlinks one walk follows, as the kernel's own
// path walk does (its MAXSYMLINKS), so a loop of links ends in ELOOP.
const maxLinks = 40

// mkdirInRoot walks p inside root one component at a time and makes each
// missing directory (0755), following the image's symlinks as if root were
// "/": an absolute link restarts at root, ".." never climbs above it. A
// dangling link is followed too, and the directories are made where it
// points, inside root (rkt's stage1 did so: securejoin's in-root
// semantics); pathrs-lite's MkdirAll refuses it.
//
// Nothing here goes through a path string the image can change under us:
// each step is an openat with O_NOFOLLOW from the handle of the directory
// before it, a link is read from its parent's handle with readlinkat, and
// ".." is taken from the walk's own stack of handles, not from the file
// system, so a directory moved or swapped for a link meanwhile fails the
// step (ENOTDIR, ELOOP) instead of leading out of root.
func mkdirInRoot(root *os.File, p string) (*os.File, error) {
	fail := func(err error) error { return &os.PathError{Op: "mkdir in root", Path: p, Err: err} }
	rfd, err := unix.Openat(int(root.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fail(err)
	}
	// stack holds the handles from root (stack[0]) to the current
	// directory (its last).
	stack := []int{rfd}
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()
	todo := strings.Split(p, "/")
	links := 0
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		cur := stack[len(stack)-1]
		switch part {
		case "", ".":
			continue
		case "..":
			if len(stack) > 1 {
				unix.Close(cur)
				stack = stack[:len(stack)-1]
			}
			continue
		}
		var st unix.Stat_t
		err := unix.Fstatat(cur, part, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(cur, part, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, fail(err)
			}
			// Made here or by someone else meanwhile: the open below
			// takes it only if it is a directory.
			st.Mode = unix.S_IFDIR
		} else if err != nil {
			return nil, fail(err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if links++; links > maxLinks {
				return nil, fail(unix.ELOOP)
			}
			target, err := readlinkat(cur, part)
			if err != nil {
				return nil, fail(err)
			}
			if strings.HasPrefix(target, "/") {
				for _, fd := range stack[1:] {
					unix.Close(fd)
				}
				stack = stack[:1]
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		fd, err := unix.Openat(cur, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fail(err)
		}
		stack = append(stack, fd)
	}
	last := stack[len(stack)-1]
	stack = stack[:len(stack)-1]
	return os.NewFile(uintptr(last), p), nil
}

// readlinkat reads the link name in the directory dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
		if size >= unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
	}
}
