// Package safefile writes and reads files that someone else may be reading,
// or may have tampered with: every write is atomic (a temp file renamed
// over the target, so a reader sees the old file or the complete new one,
// never a prefix), never follows a symlink planted at the target or the
// temp name, and is durable (fsync of the file, then of the directory)
// when asked. The readers refuse symlinks, FIFOs and files over a bound.
// status, the pod directory writers of both sides, and gc use it; it
// imports nothing of pod1.
package safefile

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Sync says whether a write must survive a host crash.
type Sync bool

const (
	// Durable writes fsync the temp file before the rename and the
	// directory after it: what is read after the writer is gone (an
	// app's final status, rkt's pod files, gc's moves).
	Durable Sync = true
	// Volatile writes only rename: readers still see the old or the new
	// file, never a mix, but a host crash may lose the change. That is
	// right for what describes a running pod (the pid file, records,
	// specs, options), which a host crash ends anyway, and saves two
	// fsyncs per file on a pod's start (docs/design-start.md).
	Volatile Sync = false
)

// Dir is an open directory. Every write goes through the directory fd,
// never through a path string, so nothing planted later in the path (a
// symlink for a directory component) can redirect a write made as root
// (threats T4, T14).
type Dir struct {
	f *os.File
}

// OpenDir opens a directory without following a symlink at its last
// component.
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{f: os.NewFile(uintptr(fd), path)}, nil
}

// NewDir wraps an already opened directory.
func NewDir(f *os.File) *Dir { return &Dir{f: f} }

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Fd returns the directory's file descriptor.
func (d *Dir) Fd() int { return int(d.f.Fd()) }

// Name is the path the directory was opened by.
func (d *Dir) Name() string { return d.f.Name() }

// Fsynced, when set, is told of every fsync: of a file written Durable
// (the name it is written to, in its directory) and of a directory. Tests
// count the fsyncs of a writer with it; nothing else sets it.
var Fsynced func(path string)

func fsynced(path string) {
	if Fsynced != nil {
		Fsynced(path)
	}
}

// Sync makes durable the renames and creations made in the directory.
func (d *Dir) Sync() error {
	fsynced(d.Name())
	if err := unix.Fsync(d.Fd()); err != nil {
		return fmt.Errorf("fsync %s: %w", d.Name(), err)
	}
	return nil
}

// WriteFile atomically replaces name (one component) in the directory with
// data, mode perm whatever the umask. The temp file has a name of its own
// per write (".<name>.tmp-<random>"), created with O_EXCL|O_NOFOLLOW, so
// two writers of one name never rename each other's partial file.
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode, sync Sync) error {
	return d.write(name, name, data, perm, sync, false, time.Time{})
}

// WriteFileTimed is WriteFile that gives the file the modification time
// mtime before it is renamed into place, so that no reader sees another:
// for a file whose mtime is itself read as a record (the pid file's is the
// pod's start, for rkt list and rkt status).
func (d *Dir) WriteFileTimed(name string, data []byte, perm os.FileMode, sync Sync, mtime time.Time) error {
	return d.write(name, name, data, perm, sync, false, mtime)
}

// WriteReserved is WriteFile that first fills the temp file Reserve made
// for name, if there is one, so that it cannot fail for lack of space.
// Only the owner of name may use it: the reservation's name is fixed.
func (d *Dir) WriteReserved(name string, data []byte, perm os.FileMode, sync Sync) error {
	return d.write(name, name, data, perm, sync, true, time.Time{})
}

// WriteReservedAs is WriteReserved that fills name's reservation but
// renames it to as: a file that another process moves to name later (the
// lock keeper commits an app's final status so, status.WritePending).
func (d *Dir) WriteReservedAs(name, as string, data []byte, perm os.FileMode, sync Sync) error {
	return d.write(name, as, data, perm, sync, true, time.Time{})
}

// write fills a temp file for name (its reservation if reserved and
// there is one), gives it mtime unless that is zero, and renames it to as.
func (d *Dir) write(name, as string, data []byte, perm os.FileMode, sync Sync, reserved bool, mtime time.Time) error {
	dirfd := d.Fd()
	fd, tmp, filled := -1, "", false
	if reserved {
		fd, tmp = openReservation(dirfd, name)
		filled = fd >= 0
	}
	if fd < 0 {
		var err error
		if fd, tmp, err = createUnique(dirfd, as); err != nil {
			return err
		}
	}
	// The raw descriptor, not an *os.File: PID 1 writes a dozen files on
	// a pod's start and two at every app's exit, and os.NewFile costs an
	// fcntl and a failed epoll registration each.
	if sync == Durable {
		fsynced(filepath.Join(d.Name(), as))
	}
	err := fill(fd, tmp, data, perm, sync)
	if err == nil && filled {
		// To the data's length: shrinking frees blocks, it never
		// needs one.
		if terr := unix.Ftruncate(fd, int64(len(data))); terr != nil {
			err = fmt.Errorf("truncate %s: %w", tmp, terr)
		}
	}
	if err == nil && !mtime.IsZero() {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime.UnixNano())}
		if terr := unix.UtimesNanoAt(dirfd, tmp, ts, unix.AT_SYMLINK_NOFOLLOW); terr != nil {
			err = fmt.Errorf("set mtime of %s: %w", tmp, terr)
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", tmp, cerr)
	}
	if err == nil {
		// renameat replaces a planted symlink named <name> itself; it
		// never follows it.
		if rerr := unix.Renameat(dirfd, tmp, dirfd, as); rerr != nil {
			err = fmt.Errorf("rename %s: %w", as, rerr)
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return err
	}
	if sync == Durable {
		// Also makes durable every Volatile rename before it in this
		// directory (an app's record, written just before its status).
		return d.Sync()
	}
	return nil
}

// Symlink atomically replaces name in the directory with a symlink to
// target: a reader sees the old entry or the new link, never none. The
// link is made under a fresh temp name (symlinkat fails on whatever is
// there, a planted symlink included) and renamed into place; renameat
// replaces a planted name itself, never following it. A symlink has no
// data to fsync: the rename is as durable as the directory.
func (d *Dir) Symlink(name, target string) error {
	dirfd := d.Fd()
	for range 100 {
		tmp := "." + name + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
		err := unix.Symlinkat(target, dirfd, tmp)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return fmt.Errorf("symlink %s: %w", name, err)
		}
		if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
			_ = unix.Unlinkat(dirfd, tmp, 0)
			return fmt.Errorf("rename %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("symlink %s: a temp name: %w", name, unix.EEXIST)
}

// reservationName is the fixed temp name of name's reservation. A leading
// dot cannot collide with an app name (an ACName has no dot).
func reservationName(name string) string { return "." + name + ".tmp" }

// Reserve makes the next WriteReserved of name, of at most size bytes,
// unable to fail for lack of space: it creates that write's temp file now
// with its blocks allocated (fallocate), and the write fills it in place.
func (d *Dir) Reserve(name string, size int64) error {
	tmp := reservationName(name)
	fd, err := createFixed(d.Fd(), tmp)
	if err != nil {
		return err
	}
	err = unix.Fallocate(fd, 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		// A file system without fallocate allocates what is written.
		_, err = unix.Pwrite(fd, make([]byte, size), 0)
	}
	unix.Close(fd)
	if err != nil {
		_ = unix.Unlinkat(d.Fd(), tmp, 0)
		return fmt.Errorf("reserve %s: %w", tmp, err)
	}
	return nil
}

// Unreserve removes name's reservation, if any.
func (d *Dir) Unreserve(name string) {
	_ = unix.Unlinkat(d.Fd(), reservationName(name), 0)
}

// openReservation opens the temp file Reserve made for name: it must be a
// regular file with a single link, else it is taken for something planted
// and left for createUnique's write to ignore.
func openReservation(dirfd int, name string) (int, string) {
	tmp := reservationName(name)
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, ""
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 {
		return fd, tmp
	}
	unix.Close(fd)
	return -1, ""
}

const createFlags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC

// createUnique creates a fresh temp file for name that no other writer
// uses: O_EXCL|O_NOFOLLOW refuses whatever is there, a symlink included,
// and the next random name is tried.
func createUnique(dirfd int, name string) (int, string, error) {
	for range 100 {
		tmp := "." + name + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
		fd, err := unix.Openat(dirfd, tmp, createFlags, 0o600)
		if err == nil {
			return fd, tmp, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return -1, "", fmt.Errorf("create %s: %w", tmp, err)
		}
	}
	return -1, "", fmt.Errorf("create a temp file for %s: %w", name, unix.EEXIST)
}

// createFixed creates tmp as a fresh regular file of our own: whatever is
// already there (a reservation left by a crash, or something planted, a
// symlink included) is removed and the create tried once more. Removing
// it only when it is there saves a system call.
func createFixed(dirfd int, tmp string) (int, error) {
	fd, err := unix.Openat(dirfd, tmp, createFlags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		if err := unix.Unlinkat(dirfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return -1, fmt.Errorf("remove stale %s: %w", tmp, err)
		}
		fd, err = unix.Openat(dirfd, tmp, createFlags, 0o600)
	}
	if err != nil {
		return -1, fmt.Errorf("create %s: %w", tmp, err)
	}
	return fd, nil
}

// fill writes data to fd, sets its mode and, if durable, fsyncs it.
func fill(fd int, tmp string, data []byte, perm os.FileMode, sync Sync) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		data = data[n:]
	}
	if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if sync == Durable {
		if err := unix.Fsync(fd); err != nil {
			return fmt.Errorf("fsync %s: %w", tmp, err)
		}
	}
	return nil
}

// WriteIn atomically replaces name in the directory dir, which is opened
// as OpenDir does (no symlink at its last component).
func WriteIn(dir, name string, data []byte, perm os.FileMode, sync Sync) error {
	d, err := OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteFile(name, data, perm, sync)
}

// WriteFile atomically replaces the file at path, a path the caller names
// (its directory is followed as os.WriteFile follows it).
func WriteFile(path string, data []byte, perm os.FileMode, sync Sync) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	d := &Dir{f: os.NewFile(uintptr(fd), dir)}
	defer d.Close()
	if err := d.WriteFile(base, data, perm, sync); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncDirs makes durable the renames and creations made in each of dirs
// (a directory moved from one to another: both).
func SyncDirs(dirs ...string) error {
	for _, dir := range dirs {
		fsynced(dir)
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sync %s: %w", dir, err)
		}
		err = unix.Fsync(fd)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("sync %s: %w", dir, err)
		}
	}
	return nil
}
