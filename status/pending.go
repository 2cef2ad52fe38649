package status

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/safefile"
)

// PendingSuffix names an app's final status that PID 1 wrote as the pod
// ends and left for the lock keeper to commit: "<app>.commit". An ACName
// has no dot, so no app's status or record can take that name.
//
// Why: the last status of a pod used to be made durable by PID 1 (an fsync
// of the file and of the directory) before PID 1 could end, and PID 1's
// own end (the kernel tearing down its memory and namespaces) then came
// after it. The lock keeper, which holds the pod's lock outside the pod
// until PID 1 is gone, commits it instead, while the kernel ends PID 1:
// the same two fsyncs, no longer one after the other with PID 1's end.
// The contract is kept: the status is visible only once it is durable, and
// the lock is released only after that.
//
// The keeper commits only the apps PID 1 names on the commit pipe, one
// line each: whatever else is in the status directory, which an app that
// reached PID 1's root may write to, is never made a final status.
const PendingSuffix = ".commit"

// MaxPending is how many app names the lock keeper takes from PID 1 in a
// pod's life (waiter.c, MAX_PENDING): PID 1 commits itself the statuses it
// would name past it. The keeper keeps no list; it commits each name as it
// reads it.
const MaxPending = 1024

// maxPendingApp is the longest app name whose pending name is still a
// file name.
const maxPendingApp = 255 - len(PendingSuffix)

// PendingApp reports whether name may be sent to the lock keeper: an
// ACName (lower-case letters and digits, in groups joined by single
// dashes) whose pending name fits a file name. The keeper, in C, drops
// every line that is not one (waiter.c, pending_app).
func PendingApp(name string) bool {
	if name == "" || len(name) > maxPendingApp || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && name[i-1] != '-':
		default:
			return false
		}
	}
	return true
}

// WritePending writes app's final status complete under its pending name
// (atomic, not yet durable) for CommitPending to make durable and move to
// app's name. It uses the status's reservation, as Write does.
func (d *Dir) WritePending(app string, code int) error {
	return d.d.WriteReservedAs(app, app+PendingSuffix, Format(code), filePerm, safefile.Volatile)
}

// ErrFinalInPlace is returned by CommitPending for an app whose final
// status is already there: it is never replaced.
var ErrFinalInPlace = errors.New("a final status is already in place")

// CommitPending commits the pending final statuses of apps in the status
// directory dirfd: each is fsynced, then moved to its app's name unless a
// status is already there, then the directory is fsynced once. It returns
// the apps committed. A pending name that is not a regular file of one
// link (planted: a symlink, a FIFO, a device, a hard link) is neither
// opened nor moved, and one longer than a status is refused unread. PID 1
// calls it for a status it could not send to the lock keeper, which
// commits those it is sent the same way (waiter.c, commit_sent).
func CommitPending(dirfd int, apps []string) ([]string, error) {
	var done []string
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, app := range apps {
		if !PendingApp(app) {
			keep(fmt.Errorf("commit status of %q: not an app name", app))
			continue
		}
		name := app + PendingSuffix
		if err := syncPending(dirfd, name); err != nil {
			keep(err)
			continue
		}
		if err := moveNoReplace(dirfd, name, app); err != nil {
			keep(fmt.Errorf("commit status of %s: %w", app, err))
			continue
		}
		done = append(done, app)
	}
	if len(done) > 0 {
		if err := unix.Fsync(dirfd); err != nil {
			keep(fmt.Errorf("commit statuses: fsync directory: %w", err))
		}
	}
	return done, first
}

// moveNoReplace renames from to to in dirfd, failing if to exists. A file
// system without RENAME_NOREPLACE gets a hard link, which fails on an
// existing name too, and the unlink of from.
func moveNoReplace(dirfd int, from, to string) error {
	err := unix.Renameat2(dirfd, from, dirfd, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		if err = unix.Linkat(dirfd, from, dirfd, to, 0); err == nil {
			err = unix.Unlinkat(dirfd, from, 0)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		return ErrFinalInPlace
	}
	return err
}

// syncPending fsyncs the pending status name: a regular file of one link
// and at most a status's size. What is not one is refused before it is
// opened (opening a device may act on it) and again after (in case it was
// swapped in between).
func syncPending(dirfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("commit %s: %w", name, err)
	}
	if err := pendingFile(&st); err != nil {
		return fmt.Errorf("commit %s: %w", name, err)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("commit %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil {
		return fmt.Errorf("commit %s: %w", name, err)
	}
	if err := pendingFile(&st2); err != nil {
		return fmt.Errorf("commit %s: %w", name, err)
	}
	if st2.Ino != st.Ino || st2.Dev != st.Dev {
		return fmt.Errorf("commit %s: %w", name, safefile.ErrNotRegular)
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("commit %s: fsync: %w", name, err)
	}
	return nil
}

// ErrTooLarge is a pending status longer than any status.
var ErrTooLarge = errors.New("larger than a status")

// pendingFile checks what a pending status must be: what WritePending
// leaves.
func pendingFile(st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1:
		return safefile.ErrNotRegular
	case st.Size > int64(maxStatusLen):
		return ErrTooLarge
	}
	return nil
}
