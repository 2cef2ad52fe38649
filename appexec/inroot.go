package appexec

import (
	"errors"
	"os"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
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
// do, one openat2 finds it; otherwise pathrs-lite's MkdirAllHandle makes
// the missing part, component by component, each inside root.
func dirInRoot(root *os.File, p string) (*os.File, error) {
	f, err := openInRoot(root, p)
	if err == nil {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return f, nil
		}
		// Not a directory: MkdirAllHandle says so.
		f.Close()
	}
	return pathrs.MkdirAllHandle(root, p, 0o755)
}
