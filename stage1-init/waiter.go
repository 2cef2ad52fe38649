package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/sigpolicy"
)

// waiterName is the waiter's binary (waiter/waiter.c), next to ours in the
// stage1 image.
const waiterName = "pod1-waiter"

// waiterSwitch turns the hand-over to the waiter on: POD1_WAITER=1 in
// run's environment. It is off by default, because the hand-over can lose
// a stop signal: a Go process cannot block a signal on every one of its
// threads (the runtime unblocks SIGHUP, SIGINT and SIGTERM on each thread
// it starts, and a mask set through syscall.AllThreadsSyscall runs in a
// signal handler, whose return restores the old mask), so a stop signal
// sent to run in the last moments before the exec can be taken by
// another thread of the runtime and die with it in the exec
// (docs/benchmarks.md, "Issue 16: the waiter").
const waiterSwitch = "POD1_WAITER"

// handOverToWaiter replaces the run process by the waiter, which waits for
// PID 1 pid (pidfd) from here on, passes stop requests on, removes the
// pod's cgroups cg (nil: none), waits for the lock keeper and undoes
// stage2 (the bind of a mutable pod; "" for none). It returns only if the
// exec failed, having undone what it changed: run then waits itself.
//
// The calling goroutine must be locked to the thread that cloned PID 1:
// PID 1's parent-death signal fires when that thread ends, and the exec
// keeps only the thread that makes it. The lock's fd and the pidfd are
// the only descriptors the waiter gets besides stdio: every other one is
// close-on-exec (closeOnExecFrom3, and O_CLOEXEC on all we open).
func handOverToWaiter(req *sigpolicy.Requests, lock *os.File, pid, pidfd, keeper int, stage2 string, cg *cgroups.Group) error {
	exe, path, err := readOnlyWaiter()
	if err != nil {
		return err
	}
	defer exe.Close()
	// Every signal, not only the stop signals: those the runtime has a
	// handler for (SIGSEGV, SIGBUS, SIGURG...) have their default again
	// after the exec, which for most ends the process, until the waiter
	// has set its table. Pending, they wait for it, and those it ignores
	// are then dropped.
	var old, all unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &all, &old); err != nil {
		return fmt.Errorf("block signals: %w", err)
	}
	restoreMask := func() { _ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) }
	// What the runtime has taken so far is in req.Level() after this.
	if !req.Sync(time.Second) {
		restoreMask()
		return errors.New("stop requests not settled")
	}
	level := 0
	switch req.Level() {
	case sigpolicy.Stop:
		level = 1
	case sigpolicy.ForceStop:
		level = 2
	}
	if stage2 == "" {
		stage2 = "-"
	}
	argv := []string{waiterName, strconv.Itoa(pid), strconv.Itoa(pidfd), strconv.Itoa(keeper), strconv.Itoa(level), stage2}
	if cg != nil {
		argv = append(argv, cg.Dirs()...)
	}
	inherit := []int{int(lock.Fd()), pidfd}
	for _, fd := range inherit {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			restoreMask()
			return fmt.Errorf("waiter: fd %d: %w", fd, err)
		}
	}
	err = unix.Exec(path, argv, []string{})
	for _, fd := range inherit {
		unix.CloseOnExec(fd)
	}
	restoreMask()
	return fmt.Errorf("exec %s: %w", waiterName, err)
}

// readOnlyWaiter opens the waiter next to our own binary as a detached,
// read-only mount of that one file (as readOnlySelf does ours), and
// returns the path that executes it while the file is open.
func readOnlyWaiter() (*os.File, string, error) {
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, "", fmt.Errorf("waiter: %w", err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(filepath.Dir(self), waiterName), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return nil, "", fmt.Errorf("waiter: open_tree: %w", err)
	}
	f := os.NewFile(uintptr(fd), waiterName)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("waiter: mount_setattr: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, "", fmt.Errorf("waiter: %s is not a regular file", waiterName)
	}
	return f, "/proc/self/fd/" + strconv.Itoa(fd), nil
}
