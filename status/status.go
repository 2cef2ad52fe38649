// Package status owns the per-app exit status files that rkt and the host
// tools read: the format ("<decimal>\n", rkt's reaper.sh format read with
// fmt.Sscanf("%d")), the atomic, symlink-proof write, the strict read, and
// the table that turns a wait status into the integer rkt expects.
package status

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Exit codes with a fixed meaning, defined once (tini, rkt).
const (
	// CodeExecNotPermitted is recorded when the app's executable exists
	// but cannot be executed (EACCES and similar), as a shell does.
	CodeExecNotPermitted = 126
	// CodeExecNotFound is recorded when the app's executable (or its
	// interpreter) does not exist.
	CodeExecNotFound = 127
	// CodeSignalBase is added to the signal number of an app killed by a
	// signal.
	CodeSignalBase = 128
	// CodeStage1Failure is the exit code of a stage1 that failed to set up
	// the pod (rkt's convention, stage1_fly and stage0 use it too).
	CodeStage1Failure = 254
)

// maxFileSize bounds what Read accepts; a valid status is at most a few
// bytes, anything longer is garbage.
const maxFileSize = 64

// ErrMalformed is returned by Read when a status file exists but does not
// hold a single decimal integer followed by a newline.
var ErrMalformed = errors.New("malformed status file")

// FromWaitStatus maps a raw wait status to the integer written to the
// status file: the exit code, or 128+signal for a signal death.
func FromWaitStatus(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return CodeSignalBase + int(ws.Signal())
	default:
		// Stopped/continued are never reported because the reaper does not
		// ask for them; treat anything else as a failure, never as 0.
		return CodeSignalBase
	}
}

// Format returns the bytes of a status file holding code.
func Format(code int) []byte {
	return []byte(strconv.Itoa(code) + "\n")
}

// Parse is the strict reader of status file content: one decimal integer
// (optionally negative) and a trailing newline, nothing else.
func Parse(b []byte) (int, error) {
	s, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || len(s) == 0 || len(s) > 11 {
		return 0, fmt.Errorf("%w: %q", ErrMalformed, b)
	}
	n, err := strconv.Atoi(string(s))
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrMalformed, b)
	}
	return n, nil
}

// Dir is an open status directory (stage1/rootfs/rkt/status). Every write
// goes through the directory fd, never through a path string, so nothing an
// app plants later in the path (a symlink for a directory component) can
// redirect a write made as root (threats T4, T14).
type Dir struct {
	f *os.File
}

// OpenDir opens the status directory without following a symlink at its
// last component.
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

// Write records code for app: a temp file ".<app>.tmp" is created with
// O_EXCL|O_NOFOLLOW, written, fsynced and renamed over "<app>", then the
// directory is fsynced. A reader sees either no file or the complete
// integer, never an empty or partial one (rkt issue #3472). Leading-dot
// names cannot collide with an app name (an ACName has no dot).
func (d *Dir) Write(app string, code int) error {
	return d.write(app, Format(code), true)
}

// WriteFile atomically replaces name in the directory with data, as Write
// does, but without the fsyncs: readers see the old or the new file, never
// a mix, but a host crash may lose the change. That is right for what
// describes a running pod (the pid file, records, specs), which a host
// crash ends anyway; an fsync costs 0.5-5 ms on a virtual disk, and a pod
// start wrote nine such files (docs/benchmarks.md). Only an app's final
// status, which rkt reads after the pod is gone, is made durable.
func (d *Dir) WriteFile(name string, data []byte) error {
	return d.write(name, data, false)
}

func (d *Dir) write(name string, data []byte, durable bool) error {
	tmp := tempName(name)
	dirfd := d.Fd()
	fd, reserved, err := openTemp(dirfd, tmp)
	if err != nil {
		return err
	}
	// The raw descriptor, not an *os.File: this runs a dozen times on a
	// pod's start and at every app's exit, and os.NewFile costs an fcntl.
	err = fill(fd, tmp, data, durable)
	if err == nil && reserved {
		// To the data's length: shrinking frees blocks, it never
		// needs one.
		if terr := unix.Ftruncate(fd, int64(len(data))); terr != nil {
			err = fmt.Errorf("truncate %s: %w", tmp, terr)
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", tmp, cerr)
	}
	if err == nil {
		// renameat replaces a planted symlink named <name> itself; it
		// never follows it.
		if rerr := unix.Renameat(dirfd, tmp, dirfd, name); rerr != nil {
			err = fmt.Errorf("rename %s: %w", name, rerr)
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return err
	}
	if durable {
		// Also makes durable the renames of every WriteFile before it
		// in this directory (an app's record, written just before).
		if err := unix.Fsync(dirfd); err != nil {
			return fmt.Errorf("fsync status dir: %w", err)
		}
	}
	return nil
}

func tempName(name string) string { return "." + name + ".tmp" }

// Sizes reserved for the next write of a status and of a record: a status
// is at most 12 bytes; a record, whose app name is at most a few hundred,
// fits in one block of any file system.
const (
	statusReserve = 64
	recordReserve = 4096
)

// Reserve makes the next write of app's status or record unable to fail
// for lack of space: it creates that write's temp file now, with its
// blocks allocated (fallocate), and the write then fills it in place and
// renames it. An app that fills the file system the status directory is
// on (its rootfs is often on the same one) must not cost another app its
// final status. rec selects the record ("<app>.json"), else the status.
func (d *Dir) Reserve(app string, rec bool) error {
	name, size := app, statusReserve
	if rec {
		name, size = app+RecordSuffix, recordReserve
	}
	tmp := tempName(name)
	fd, err := createTemp(d.Fd(), tmp)
	if err != nil {
		return err
	}
	err = unix.Fallocate(fd, 0, 0, int64(size))
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

// Unreserve removes app's reservations, if any (the app is gone).
func (d *Dir) Unreserve(app string) {
	for _, n := range []string{app, app + RecordSuffix} {
		_ = unix.Unlinkat(d.Fd(), tempName(n), 0)
	}
}

// openTemp opens the temp file Reserve made for the write, or creates one:
// the reservation must be a regular file with a single link, else it is
// taken for something planted and replaced.
func openTemp(dirfd int, tmp string) (int, bool, error) {
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 {
			return fd, true, nil
		}
		unix.Close(fd)
	}
	fd, err = createTemp(dirfd, tmp)
	return fd, false, err
}

// createTemp creates tmp in the directory as a fresh regular file of our
// own: O_EXCL|O_NOFOLLOW refuses whatever is already there (a temp file
// left by a crash, or one planted, a symlink included), which is then
// removed and the create tried once more. Removing it only when it is
// there saves a system call on every write.
func createTemp(dirfd int, tmp string) (int, error) {
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, tmp, flags, 0o644)
	if errors.Is(err, unix.EEXIST) {
		if err := unix.Unlinkat(dirfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return -1, fmt.Errorf("remove stale %s: %w", tmp, err)
		}
		fd, err = unix.Openat(dirfd, tmp, flags, 0o644)
	}
	if err != nil {
		return -1, fmt.Errorf("create %s: %w", tmp, err)
	}
	return fd, nil
}

// fill writes data to fd and, if durable, fsyncs it.
func fill(fd int, tmp string, data []byte, durable bool) error {
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
	if durable {
		if err := unix.Fsync(fd); err != nil {
			return fmt.Errorf("fsync %s: %w", tmp, err)
		}
	}
	return nil
}

// WriteFileIn atomically replaces name in the directory dir with data, as
// (*Dir).WriteFile does (not durably).
func WriteFileIn(dir, name string, data []byte) error {
	d, err := OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteFile(name, data)
}

// Remove deletes app's status file if present.
func (d *Dir) Remove(app string) error {
	if err := unix.Unlinkat(d.Fd(), app, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove status of %s: %w", app, err)
	}
	return nil
}

// Read returns app's recorded exit code. A missing file is reported as an
// error satisfying errors.Is(err, os.ErrNotExist); a file that is not a
// regular file or does not hold a valid integer is ErrMalformed, never a
// default value.
func (d *Dir) Read(app string) (int, error) {
	return readAt(d.Fd(), app)
}

// Read returns the exit code recorded in the status directory at dir for
// app, with the same strictness as (*Dir).Read.
func Read(dir, app string) (int, error) {
	d, err := OpenDir(dir)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	return d.Read(app)
}

func readAt(dirfd int, name string) (int, error) {
	b, err := readFileAt(dirfd, name, maxFileSize)
	if err != nil {
		return 0, err
	}
	return Parse(b)
}

func (d *Dir) readFile(name string, max int) ([]byte, error) {
	return readFileAt(d.Fd(), name, max)
}

// readFileAt reads a regular file of at most max bytes from the directory,
// never following a symlink and never blocking on a FIFO.
func readFileAt(dirfd int, name string, max int) ([]byte, error) {
	b, err := ReadRegularAt(dirfd, name, int64(max))
	switch {
	case err == nil:
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: %s is a symlink", ErrMalformed, name)
	case errors.Is(err, ErrNotRegular):
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrMalformed, name)
	case errors.Is(err, ErrTooLarge):
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, name, errTooLong)
	default:
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrMalformed, name)
	}
	return b, nil
}
