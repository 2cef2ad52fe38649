package launch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/idmap"
)

// copyTree copies the tree at src to dst (which must not exist yet) for
// --no-overlay, keeping modes (setuid/setgid/sticky included), owners,
// times, symlinks (as links, never followed), hardlinks between files
// inside the tree, and device nodes. Sockets are skipped: they are runtime
// state, not image content. Every destination entry is created exclusively
// and without following symlinks, so a link copied earlier cannot redirect
// a later write.
//
// With shift (--private-users) every owner id N becomes shift's N+BASE,
// as rkt's stage0 shifts the trees it copies; an id past COUNT is refused.
func copyTree(src, dst string, shift *idmap.Range) error {
	c := treeCopier{links: make(map[fileID]string), shift: shift}
	err := filepath.WalkDir(src, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if err := c.copyEntry(path, filepath.Join(dst, rel)); err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy tree %s: %w", src, err)
	}
	// Directory times last, in reverse walk order: creating children
	// updates a directory's mtime.
	for i := len(c.dirs) - 1; i >= 0; i-- {
		if err := setTimes(c.dirs[i].path, &c.dirs[i].st); err != nil {
			return fmt.Errorf("copy tree %s: %w", src, err)
		}
	}
	return nil
}

type fileID struct{ dev, ino uint64 }

type dirTimes struct {
	path string
	st   unix.Stat_t
}

type treeCopier struct {
	links map[fileID]string // first copy of each multiply-linked file
	dirs  []dirTimes
	shift *idmap.Range
}

// owner is the owner a copy gets.
func (c *treeCopier) owner(st *unix.Stat_t) (int, int, error) {
	if c.shift == nil {
		return int(st.Uid), int(st.Gid), nil
	}
	uid, err := c.shift.ToHost(int(st.Uid))
	if err != nil {
		return 0, 0, err
	}
	gid, err := c.shift.ToHost(int(st.Gid))
	return uid, gid, err
}

func (c *treeCopier) copyEntry(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return fmt.Errorf("lstat: %w", err)
	}
	perm := st.Mode & 0o7777
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return fmt.Errorf("mkdir: %w", err)
		}
		c.dirs = append(c.dirs, dirTimes{dst, st})
		return c.chownChmod(dst, &st, perm)
	case unix.S_IFREG:
		id := fileID{uint64(st.Dev), st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[id]; ok {
				if err := unix.Link(first, dst); err != nil {
					return fmt.Errorf("hardlink: %w", err)
				}
				return nil
			}
			c.links[id] = dst
		}
		if err := copyFile(src, dst); err != nil {
			return err
		}
		if err := c.chownChmod(dst, &st, perm); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("readlink: %w", err)
		}
		if err := unix.Symlink(target, dst); err != nil {
			return fmt.Errorf("symlink: %w", err)
		}
		uid, gid, err := c.owner(&st)
		if err != nil {
			return err
		}
		if err := unix.Lchown(dst, uid, gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("mknod: %w", err)
		}
		if err := c.chownChmod(dst, &st, perm); err != nil {
			return err
		}
	default:
		return nil
	}
	return setTimes(dst, &st)
}

// chownChmod sets owner, then mode: chown clears setuid/setgid. dst was
// just created by us and is not a symlink, so following is harmless.
func (c *treeCopier) chownChmod(dst string, st *unix.Stat_t, perm uint32) error {
	uid, gid, err := c.owner(st)
	if err != nil {
		return err
	}
	if err := unix.Lchown(dst, uid, gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Chmod(dst, perm); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

func copyFile(src, dst string) (retErr error) {
	in, err := os.OpenFile(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && retErr == nil {
			retErr = fmt.Errorf("close: %w", cerr)
		}
	}()
	// io.Copy between two *os.File uses copy_file_range, so big images
	// copy in the kernel (or reflink on file systems that can).
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy data: %w", err)
	}
	return nil
}

// setTimes copies atime and mtime onto dst itself (not a symlink target).
func setTimes(dst string, st *unix.Stat_t) error {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}
