// Package status owns the per-app exit status files that rkt and the host
// tools read: the format ("<decimal>\n", rkt's reaper.sh format read with
// fmt.Sscanf("%d")), its files and the apps' JSON records beside them
// (written through safefile), the strict read, and the table that turns a
// wait status into the integer rkt expects.
package status

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/safefile"
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

// maxStatusLen is the longest status Parse accepts, its newline included:
// a 32-bit integer's digits and sign.
const maxStatusLen = len("-2147483648\n")

// Parse is the strict reader of status file content: one decimal integer
// (optionally negative) and a trailing newline, nothing else.
func Parse(b []byte) (int, error) {
	s, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || len(s) == 0 || len(s) >= maxStatusLen {
		return 0, fmt.Errorf("%w: %q", ErrMalformed, b)
	}
	n, err := strconv.Atoi(string(s))
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrMalformed, b)
	}
	return n, nil
}

// Dir is an open status directory (stage1/rootfs/rkt/status), written
// through safefile: through the directory fd, never following a symlink
// planted at a status's name or its temp name.
type Dir struct {
	d *safefile.Dir
}

// OpenDir opens the status directory without following a symlink at its
// last component.
func OpenDir(path string) (*Dir, error) {
	d, err := safefile.OpenDir(path)
	if err != nil {
		return nil, err
	}
	return &Dir{d: d}, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return d.d.Close() }

// Fd returns the directory's file descriptor.
func (d *Dir) Fd() int { return d.d.Fd() }

// filePerm is the mode of status files and records: rkt and the host
// tools read them as any user.
const filePerm = 0o644

// Write records code for app, durably: a reader sees either no file or
// the complete integer, never an empty or partial one (rkt issue #3472),
// and a host crash after Write returns does not lose it. Only an app's
// final status, which rkt reads after the pod is gone, is made durable;
// its record is written Volatile just before, and the directory's fsync
// here makes that rename durable too.
func (d *Dir) Write(app string, code int) error {
	return d.d.WriteReserved(app, Format(code), filePerm, safefile.Durable)
}

// Sizes reserved for the next write of a status and of a record: a status
// is at most 12 bytes; a record, whose app name is at most a few hundred,
// fits in one block of any file system.
const (
	statusReserve = 64
	recordReserve = 4096
)

// Reserve makes the next write of app's status or record unable to fail
// for lack of space (safefile's Reserve). An app that fills the file
// system the status directory is on (its rootfs is often on the same one)
// must not cost another app its final status. rec selects the record
// ("<app>.json"), else the status.
func (d *Dir) Reserve(app string, rec bool) error {
	if rec {
		return d.d.Reserve(app+RecordSuffix, recordReserve)
	}
	return d.d.Reserve(app, statusReserve)
}

// Unreserve removes app's reservations, if any (the app is gone).
func (d *Dir) Unreserve(app string) {
	d.d.Unreserve(app)
	d.d.Unreserve(app + RecordSuffix)
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
	b, err := safefile.ReadRegularAt(dirfd, name, int64(max))
	switch {
	case err == nil:
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: %s is a symlink", ErrMalformed, name)
	case errors.Is(err, safefile.ErrNotRegular):
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrMalformed, name)
	case errors.Is(err, safefile.ErrTooLarge):
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, name, errTooLong)
	default:
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrMalformed, name)
	}
	return b, nil
}
