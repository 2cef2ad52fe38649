package gc

import (
	"errors"
	"fmt"
	"os"
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
	r := &remover{progress: progress}
	if err := r.removeAt(parent, filepath.Base(path)); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

type remover struct {
	progress func()
}

func (r *remover) removeAt(parent int, name string) error {
	err := unix.Unlinkat(parent, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		r.removed()
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("unlink %s: %w", name, err)
	}
	fd, err := unix.Openat2(parent, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("%s: %w", name, errCrossesMount)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			if err := r.removeAt(fd, n); err != nil {
				return fmt.Errorf("%s/%w", name, err)
			}
		}
		if len(names) == 0 || err != nil {
			break
		}
		// Entries were deleted under the cursor: start over.
		if _, err := d.Seek(0, 0); err != nil {
			return err
		}
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", name, err)
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
