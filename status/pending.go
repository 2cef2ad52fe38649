package status

import (
	"fmt"
	"os"
	"strings"

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
const PendingSuffix = ".commit"

// WritePending writes app's final status complete under its pending name
// (atomic, not yet durable) for CommitPending to make durable and move to
// app's name. It uses the status's reservation, as Write does.
func (d *Dir) WritePending(app string, code int) error {
	return d.d.WriteReservedAs(app, app+PendingSuffix, Format(code), filePerm, safefile.Volatile)
}

// CommitPending commits every pending final status in the status
// directory dirfd: each is fsynced, then renamed to its app's name, then
// the directory is fsynced once. It returns the apps committed. A pending
// name that is not a regular file (planted: a symlink, a FIFO, a device)
// is neither opened nor moved. The lock keeper (its C twin is in
// waiter/waiter.c) and run without the waiter call it.
func CommitPending(dirfd int) ([]string, error) {
	names, err := pendingNames(dirfd)
	if err != nil {
		return nil, err
	}
	var done []string
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, name := range names {
		app := strings.TrimSuffix(name, PendingSuffix)
		if err := syncRegular(dirfd, name); err != nil {
			keep(err)
			continue
		}
		if err := unix.Renameat(dirfd, name, dirfd, app); err != nil {
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

// pendingNames lists the directory's pending names: "<app>.commit" with an
// app name that is neither empty nor hidden.
func pendingNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("commit statuses: %w", err)
	}
	f := os.NewFile(uintptr(fd), "status")
	defer f.Close()
	all, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("commit statuses: %w", err)
	}
	var names []string
	for _, n := range all {
		app, ok := strings.CutSuffix(n, PendingSuffix)
		if ok && app != "" && !strings.HasPrefix(app, ".") {
			names = append(names, n)
		}
	}
	return names, nil
}

// syncRegular fsyncs the regular file name. What is not one is refused
// before it is opened (opening a device may act on it) and again after
// (in case it was swapped in between).
func syncRegular(dirfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("commit %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("commit %s: %w", name, safefile.ErrNotRegular)
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
	if st2.Mode&unix.S_IFMT != unix.S_IFREG || st2.Ino != st.Ino || st2.Dev != st.Dev {
		return fmt.Errorf("commit %s: %w", name, safefile.ErrNotRegular)
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("commit %s: fsync: %w", name, err)
	}
	return nil
}
