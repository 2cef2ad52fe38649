package appexec

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec/seccomp"
	"github.com/pod1/pod1/status"
)

// The apps' pid namespace (threats T24).
//
// The apps of a pod share a pid namespace of their own, nested under the
// one PID 1 and the stage1's other processes live in, whose init is
// pod1-pause. No stage1 process is a member of it: an app cannot name
// one, so it can neither signal, ptrace nor open /proc/PID/... of any,
// whatever capabilities it holds. The process that sets an app up (its
// mounts, its root, its credentials) works in PID 1's namespace, with the
// stage1's privileges and descriptors; only then does it clone the app's
// process into the apps' namespace (setns of the namespace for its
// children, then clone), and that process, already holding the app's
// credentials, capabilities and nothing but its stdio, installs the
// filter and execs. CLONE_PARENT makes it PID 1's child (or, for enter,
// the enter entry point's), which reaps it; the set-up process reports
// its pid and exits.

// PidNSFd is where an app's set-up process finds the apps' pid namespace.
const PidNSFd = 5

// GateFd is what the app's process reads before its execve: a pipe PID 1
// closes once every app of the pod's start has its process (a process
// forked later is held by the pod's pids.max, which the kernel checks at
// fork: a first app that forked at once could otherwise fill it before
// its siblings' processes were cloned), or /dev/null, which lets it go at
// once. The set-up process holds it there from its birth.
const GateFd = seccomp.LaunchGateFd

// CgroupNSFd is where an app's set-up process finds the apps' cgroup
// namespace, with Spec.CgroupNS (a host with only cgroup v2): rooted at
// the apps' cgroup, in which an app sees its own as "/app-<name>", and
// no cgroup outside the pod's apps. Above GateFd, which the app's
// process closes before its gate like every descriptor it does not keep.
const CgroupNSFd = GateFd + 1

// joinAppsCgroupNS makes the apps' cgroup namespace the calling thread's,
// which the processes it clones are born in, when s asks for it.
func joinAppsCgroupNS(s *Spec) error {
	if !s.CgroupNS {
		return nil
	}
	if err := unix.Setns(CgroupNSFd, unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("join the apps' cgroup namespace: %w", err)
	}
	return nil
}

// AppsProc is where PID 1's root holds a procfs of the apps' pid
// namespace: a set-up process clones it for the app's /proc. A procfs
// shows the pid namespace of the process that made it, which no stage1
// process is a member of; pod1-pause made this one.
const AppsProc = "/pod1-apps-proc"

// appsProcFd, when not -1, is a detached procfs of the apps' namespace
// handed to this process (a spare, started before PID 1 had AppsProc),
// and appsPidNS the namespace: PidNSFd but for a spare.
var (
	appsProcFd = -1
	appsPidNS  = PidNSFd
)

// joinAppsPidNS makes the apps' pid namespace the one the calling
// thread's children are born in. The thread must be locked: the
// namespace for children is a thread's, and the clone must come from it.
func joinAppsPidNS(fd int) error {
	if err := unix.Setns(fd, unix.CLONE_NEWPID); err != nil {
		return fmt.Errorf("join the apps' pid namespace: %w", err)
	}
	return nil
}

// mountAppsProc attaches a procfs of the apps' pid namespace at target in
// root: a copy of AppsProc, or the one this process was handed.
func mountAppsProc(root *os.File, target string) error {
	d, err := pseudoDir(root, target)
	if err != nil {
		return err
	}
	defer d.Close()
	src := appsProcFd
	if src >= 0 {
		appsProcFd = -1
	} else if src, err = unix.OpenTree(unix.AT_FDCWD, AppsProc, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC); err != nil {
		return fmt.Errorf("procfs of the apps' pid namespace: %w", err)
	}
	defer unix.Close(src)
	// PID 1 keeps its copy read-only; the app's /proc is writable where
	// the kernel lets it be (its own oom_score_adj, comm, ...).
	attr := unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC,
		Attr_clr: unix.MOUNT_ATTR_RDONLY,
	}
	if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("procfs of the apps' pid namespace: mount_setattr: %w", err)
	}
	return unix.MoveMount(src, "", int(d.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// Launch makes argv of the app in a new process of the apps' pid
// namespace (pidns), with the app's isolation. The caller must be on a
// thread locked with runtime.LockOSThread, still root with its
// capabilities, in the app's other namespaces and root.
//
// It returns only when it failed before anything was cloned, with the
// code the app's status must record (127, 126, 254). Otherwise it does
// not return: then runs, on another goroutine, with the pid of the new
// process as the caller sees it (0 if none could be cloned) and execErr,
// which waits for the new process to become the app and says why it could
// not (it then exits with the code its status must record, and is reaped
// like any app process), or why none was cloned; then's result is this
// process's exit code. The new process may wait at its gate (GateFd)
// until its pid is reported: then must report it before execErr.
//
// The new process is the caller's parent's child (CLONE_PARENT), in a
// session of its own; with ctty, fd 0 becomes its controlling terminal.
// It is born with the app's credentials, capabilities and filter: the
// calling thread takes them all (isolate, the filter, capset) before it
// clones, and ends there (threats T24). Nothing that runs in the apps'
// pid namespace ever holds more than the app, at any instant: a process
// there that another app stopped the moment it was born (SIGSTOP needs
// only CAP_KILL) and then rewrote through /proc/PID/mem (CAP_SYS_PTRACE)
// would gain nothing.
func Launch(s *Spec, argv []string, pidns int, ctty bool, then func(pid int, execErr func() error) int) (int, error) {
	const setupFailed = status.CodeStage1Failure
	if err := joinAppsPidNS(pidns); err != nil {
		return setupFailed, err
	}
	if err := joinAppsCgroupNS(s); err != nil {
		return setupFailed, err
	}
	if len(s.Listen) > 0 {
		ls := *s
		ls.Env = listenEnv(s.Env, s.Listen)
		s = &ls
	}
	c, code, err := command(s, argv)
	if err != nil {
		return code, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return setupFailed, fmt.Errorf("pipe: %w", err)
	}
	errRead, errWrite := p[0], p[1]
	errWrite, listen, err := takeListen(len(s.Listen), errWrite)
	if err != nil {
		unix.Close(errRead)
		unix.Close(errWrite)
		return setupFailed, err
	}
	// The thread that clones ends there, holding its P: the goroutine
	// that goes on needs another. Before the filter: this stops the
	// world.
	runtime.GOMAXPROCS(2)
	debug.SetGCPercent(-1)
	fp, err := isolate(s)
	if err != nil {
		unix.Close(errRead)
		unix.Close(errWrite)
		return setupFailed, err
	}
	st := &launchState{fp: fp, x: c.x, errFd: errWrite, ctty: ctty, tid: int32(unix.Gettid()), listen: listen}
	st.keep = append([]int32{int32(errWrite)}, listen...)
	if len(listen) > 0 {
		st.pidBuf = listenPid(c.x)
	}
	if err := st.finalCaps(s.UID == 0); err != nil {
		unix.Close(errRead)
		unix.Close(errWrite)
		return setupFailed, fmt.Errorf("isolator %s: %w", isoCaps, err)
	}
	// A procfs of our own pid namespace names every stage1 process:
	// nothing of it may be open in the app's process, even for the
	// moment before its execve.
	closePrivateProc()
	go func() {
		st.wait()
		unix.Close(st.errFd)
		os.Exit(then(st.pid, func() error { return st.result(errRead, s, c.argv0, c.missing) }))
	}()
	runtime.KeepAlive(c)
	launchFinal(st)
	panic("unreachable")
}

// launchState is what the thread that clones the app's process and the
// goroutine that goes on share.
type launchState struct {
	// tid is the cloning thread's id until it exits; the kernel then
	// clears it and wakes its futex (set_tid_address).
	tid int32
	// pid is the app's process, or 0; step and errno say what failed on
	// the cloning thread.
	pid   int
	step  byte
	errno unix.Errno
	hdr   unix.CapUserHeader
	caps  [2]unix.CapUserData
	fp    *unix.SockFprog
	x     *preparedExec
	errFd int
	ctty  bool
	// keep are the descriptors above GateFd the cloned process keeps
	// until its execve, ascending: errFd, then listen, the copies of the
	// app's sockets it moves to fds 3.. after its gate (takeListen).
	// pidBuf, with sockets, is LISTEN_PID's number in x's environment.
	keep   []int32
	listen []int32
	pidBuf *[listenPidDigits + 1]byte
}

// finalCaps makes the capability sets the cloning thread takes before it
// clones: what execve will give the app (a root app its bounding set,
// any other nothing), within what the thread holds.
func (st *launchState) finalCaps(root bool) error {
	st.hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&st.hdr, &st.caps[0]); err != nil {
		return err
	}
	var bound [2]uint32
	if root {
		for c := 0; c < 64; c++ {
			if have, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && have == 1 {
				bound[c/32] |= 1 << (c % 32)
			}
		}
	}
	for i := range st.caps {
		st.caps[i].Permitted &= bound[i]
		st.caps[i].Effective = st.caps[i].Permitted
		st.caps[i].Inheritable = 0
	}
	return nil
}

// futexWait is FUTEX_WAIT, which x/sys/unix does not name.
const futexWait = 0

// wait waits for the cloning thread's end.
func (st *launchState) wait() {
	for {
		v := atomic.LoadInt32(&st.tid)
		if v == 0 {
			return
		}
		_, _, _ = syscall.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&st.tid)), futexWait, uintptr(v), 0, 0, 0)
	}
}

// result reads what became of the cloned process: nothing on errRead
// (execve closed it) is the app running.
func (st *launchState) result(errRead int, s *Spec, argv0, missing string) error {
	defer unix.Close(errRead)
	switch st.step {
	case stepSeccomp:
		return fmt.Errorf("isolator %s-%s-set: seccomp(SET_MODE_FILTER): %w", isoSeccomp, setName(s.Isolation.Seccomp), st.errno)
	case stepCapset:
		return fmt.Errorf("isolator %s: capset: %w", isoCaps, st.errno)
	case stepClone:
		return fmt.Errorf("clone the app's process: %w", st.errno)
	}
	var report [8]byte
	if n, _ := readFull(errRead, report[:]); n < len(report) {
		return nil
	}
	step, errno := report[0], unix.Errno(binary.LittleEndian.Uint32(report[4:]))
	if step == stepListen {
		return fmt.Errorf("socket activation: dup3: %w", errno)
	}
	if step == stepCtty {
		return fmt.Errorf("controlling terminal: %w", errno)
	}
	return execError(argv0, missing, errno)
}

// The step that failed, on the cloning thread or in its child.
const (
	stepSeccomp = 1 + iota
	stepCapset
	stepClone
	stepCtty
	stepExec
	stepListen
)

// launchFinal is the cloning thread's end: the app's filter, its
// capabilities, the clone, and the thread's exit. The child runs on,
// here, through a session of its own, its terminal and execve. Every call
// is a raw system call and the function is nosplit: after the filter
// nothing of the Go runtime may run on this thread (a strict allow-list
// would refuse its calls), and in the child, which has no other thread,
// nothing of it can. isolate reset every signal's disposition, so no
// handler of the runtime runs in the child either.
//
//go:nosplit
//go:norace
func launchFinal(st *launchState) {
	_, _, _ = unix.RawSyscall(unix.SYS_SET_TID_ADDRESS, uintptr(unsafe.Pointer(&st.tid)), 0, 0)
	if st.fp != nil {
		if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(st.fp))); e != 0 {
			st.step, st.errno = stepSeccomp, e
			exitThread()
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&st.hdr)), uintptr(unsafe.Pointer(&st.caps[0])), 0); e != 0 {
		st.step, st.errno = stepCapset, e
		exitThread()
	}
	r1, _, e := unix.RawSyscall6(unix.SYS_CLONE, seccomp.LaunchCloneFlags, 0, 0, 0, 0, 0)
	if e != 0 {
		st.step, st.errno = stepClone, e
		exitThread()
	}
	if r1 != 0 {
		st.pid = int(r1)
		exitThread()
	}
	// The child. Every descriptor but 0-2, its gate, the error pipe and
	// the copies of its sockets goes now, not only at execve (the
	// set-up's report pipe among them, whose end PID 1 waits for); then
	// it waits at its gate. The set-up process holds fds 3 to GateFd
	// from its birth: the pipe and the copies are above (st.keep).
	_, _, _ = unix.RawSyscall(unix.SYS_CLOSE_RANGE, 3, GateFd-1, 0)
	lo := uintptr(GateFd + 1)
	for _, k := range st.keep {
		if uintptr(k) > lo {
			_, _, _ = unix.RawSyscall(unix.SYS_CLOSE_RANGE, lo, uintptr(k)-1, 0)
		}
		lo = uintptr(k) + 1
	}
	_, _, _ = unix.RawSyscall(unix.SYS_CLOSE_RANGE, lo, ^uintptr(0), 0)
	var b [1]byte
	for {
		_, _, e := unix.RawSyscall(unix.SYS_READ, GateFd, uintptr(unsafe.Pointer(&b[0])), 1)
		if e != unix.EINTR {
			break
		}
	}
	// The sockets, as systemd hands them over: fds 3.., open across
	// execve, and the process's own pid in LISTEN_PID.
	for i, src := range st.listen {
		if _, _, e := unix.RawSyscall(unix.SYS_DUP3, uintptr(src), uintptr(3+i), 0); e != 0 {
			childFail(st.errFd, stepListen, e, status.CodeStage1Failure)
		}
	}
	if st.pidBuf != nil {
		pid, _, _ := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
		putPid(st.pidBuf, pid)
	}
	_, _, _ = unix.RawSyscall(unix.SYS_SETSID, 0, 0, 0)
	if st.ctty {
		if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, 0, unix.TIOCSCTTY, 0); e != 0 {
			childFail(st.errFd, stepCtty, e, status.CodeStage1Failure)
		}
	}
	x := st.x
	_, _, e = unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(x.path)),
		uintptr(unsafe.Pointer(&x.argv[0])), uintptr(unsafe.Pointer(&x.envv[0])))
	code := status.CodeExecNotPermitted
	if e == unix.ENOENT || e == unix.ENOTDIR {
		code = status.CodeExecNotFound
	}
	childFail(st.errFd, stepExec, e, code)
}

// exitThread ends the calling thread alone; the kernel then clears the
// word set_tid_address named and wakes its waiter.
//
//go:nosplit
//go:norace
func exitThread() {
	for {
		_, _, _ = unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
	}
}

// childFail reports, from the cloned process, the step that failed and
// its errno on the report pipe, and ends the process with code.
//
//go:nosplit
//go:norace
func childFail(fd int, step byte, e unix.Errno, code int) {
	var b [8]byte
	b[0] = step
	b[4], b[5], b[6], b[7] = byte(e), byte(e>>8), byte(e>>16), byte(e>>24)
	_, _, _ = unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	for {
		_, _, _ = unix.RawSyscall(unix.SYS_EXIT_GROUP, uintptr(code), 0, 0)
	}
}
