package gc

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// errCrossesMount means removal met a directory on another mount.
var errCrossesMount = errors.New("refusing to remove across a mount point")

// removeTree removes the directory at path and everything in it, without
// ever following a symlink or entering another mount: every directory is
// opened with RESOLVE_NO_XDEV, so a mount that appeared after our
// mountinfo check (or one of another namespace's making, bind mounts of the
// same file system included) stops the removal instead of being emptied.
// progress, if set, is called once the first entry is gone.
func removeTree(path string, progress func()) error {
	parent, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", filepath.Dir(path), err)
	}
	defer unix.Close(parent)
	r := &remover{progress: progress, buf: make([]byte, 32<<10)}
	// The pod path itself is unlinked first if it is no directory.
	if err := r.removeAt(parent, filepath.Base(path), false); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

type remover struct {
	progress func()
	// buf takes each directory's entries (getdents64). A pod's
	// directories are small: one call usually lists one whole. The
	// entries are read straight from the fd, without an os.File (whose
	// set-up costs an fcntl, a finalizer and allocations per directory).
	buf []byte
}

func (r *remover) removeAt(parent int, name string, isDir bool) error {
	if !isDir {
		err := unix.Unlinkat(parent, name, 0)
		if err == nil || errors.Is(err, unix.ENOENT) {
			r.removed()
			return nil
		}
		// A directory that the listing did not say was one.
		if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("unlink %s: %w", name, err)
		}
	}
	fd, err := unix.Openat2(parent, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("%s: %w", name, errCrossesMount)
	}
	if errors.Is(err, unix.ENOTDIR) && isDir {
		// Replaced by a file since the listing.
		return r.removeAt(parent, name, false)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(fd)
	// Each pass lists the directory to its end and removes what it
	// listed. One pass is enough unless entries appear meanwhile; the
	// passes are bounded so that something creating entries as fast as
	// they go cannot keep gc here.
	for pass := 0; ; pass++ {
		ents, err := r.list(fd)
		if err != nil {
			return fmt.Errorf("list %s: %w", name, err)
		}
		for _, e := range ents {
			if err := r.removeAt(fd, e.name, e.isDir); err != nil {
				return fmt.Errorf("%s/%w", name, err)
			}
		}
		err = unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			break
		}
		if !errors.Is(err, unix.ENOTEMPTY) || pass == 3 {
			return fmt.Errorf("rmdir %s: %w", name, err)
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return err
		}
	}
	r.removed()
	return nil
}

func (r *remover) removed() {
	if r.progress != nil {
		r.progress()
		r.progress = nil
	}
}

type dirent struct {
	name  string
	isDir bool
}

// list reads a directory's entries to its end ("." and ".." left out).
// An entry whose type the file system does not report (DT_UNKNOWN) is
// taken as a file: removeAt then finds it is a directory (EISDIR).
func (r *remover) list(fd int) ([]dirent, error) {
	var out []dirent
	for {
		n, err := unix.Getdents(fd, r.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		b := r.buf[:n]
		for len(b) >= 19 {
			// struct linux_dirent64: ino u64, off s64, reclen u16,
			// type u8, name NUL-terminated.
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				return nil, fmt.Errorf("getdents64: bad record length %d", reclen)
			}
			typ, nm := b[18], b[19:reclen]
			if i := bytes.IndexByte(nm, 0); i >= 0 {
				nm = nm[:i]
			}
			if name := string(nm); name != "." && name != ".." {
				out = append(out, dirent{name: name, isDir: typ == unix.DT_DIR})
			}
			b = b[reclen:]
		}
	}
}
