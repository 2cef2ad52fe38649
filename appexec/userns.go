package appexec

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/status"
)

// User namespaces (--private-users).
//
// The pod's namespaces and PID 1 stay the host root's: PID 1 writes the
// status files, manages the cgroups and mounts each app's /proc, /sys and
// /dev, none of which a user namespace's root may do. Each app's process
// enters a user namespace of its own, with the pod's mapping, at the last
// moment: once its root is set up, the setup process (the app's first
// process, still host root) clones the app's real process with
// CLONE_NEWUSER, and that one applies the credentials, capabilities and
// filter and execs. A Go process cannot join a user namespace later (the
// kernel refuses setns and unshare of one to a multi-threaded process),
// so the namespace is made by clone, whose child is single-threaded until
// its execve.
//
// CLONE_PARENT makes the app's process a child of PID 1, not of the setup
// process, which reports its pid (on ReportFd) and exits: PID 1 registers
// and reaps the app itself, as without user namespaces.
//
// The capabilities an app keeps are then capabilities in its own user
// namespace only: over files whose owners are mapped, over processes of
// its uid, and nothing that the host's root, which owns the pod's mount,
// pid, uts, ipc and network namespaces, keeps for itself (mounting,
// setting the host name, ptracing PID 1, reading /proc/1/root).

// ReportFd is where an app's set-up process writes the pid of the app's
// process, in decimal; nothing (EOF) means it failed, and its own exit
// status says why.
const ReportFd = 4

// userNSFlag, as argv[1], tells the app's process it is the one in the
// user namespace, with its root already set up; enterUserNSFlag tells a
// process enter starts the same, but it stays in enter's session.
const (
	userNSFlag      = "--in-userns"
	enterUserNSFlag = "--in-userns-enter"
)

// startInUserNS is the setup process's last step: it clones the app's
// process into a new user namespace, hands it the spec and reports its pid.
func startInUserNS(s *Spec) (int, error) {
	const setupFailed = status.CodeStage1Failure
	inner, err := PrepareUserNS(s)
	if err != nil {
		return setupFailed, err
	}
	// The report fd (and any other we inherited) closes at the new
	// process's execve.
	pid, w, err := cloneInUserNS(s.UserNS, userNSFlag, unix.CLONE_PARENT)
	if err != nil {
		return setupFailed, err
	}
	defer w.Close()
	report := os.NewFile(ReportFd, "report")
	_, rerr := report.WriteString(strconv.Itoa(pid) + "\n")
	report.Close()
	if err := json.NewEncoder(w).Encode(inner); err != nil {
		// It died before reading; its exit status is the app's.
		return 0, nil
	}
	if rerr != nil {
		// PID 1 is not listening: the app's process must not run
		// unsupervised.
		_ = unix.Kill(pid, unix.SIGKILL)
		return setupFailed, fmt.Errorf("report pid: %w", rerr)
	}
	return 0, nil
}

// SelfExe is how cloneInUserNS executes the stage1 binary: through the
// app's /proc, which an app set-up process mounted itself and no volume
// may cover, unless the caller (enter, whose cwd is a private read-only
// copy of the stage1's directory) names it otherwise.
var SelfExe = "/proc/self/exe"

// cloneInUserNS starts the stage1 binary again as pod1-app with flag,
// cloned (with extra clone flags) into a new user namespace with the
// mapping u, and returns its pid and the write end of the pipe it reads
// its spec from. Only fds 0-2 and that pipe reach it.
//
// The clone is ours, not syscall.ForkExec's: ForkExec writes the new
// process's id maps through /proc/PID of the pid the clone returned, and
// the /proc we see (the app's, of the apps' pid namespace) knows it by
// another pid, or not at all. The maps go through a procfs of our own pid
// namespace (privateProc); the new process waits for them on a pipe,
// then becomes the namespace's root and execs. Until then it runs only
// raw system calls (userNSChild), every signal blocked.
func cloneInUserNS(u *idmap.Range, flag string, flags uintptr) (int, *os.File, error) {
	x, err := prepareExec(SelfExe, []string{"pod1-app", flag}, []string{})
	if err != nil {
		return 0, nil, err
	}
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, nil, fmt.Errorf("close_range: %w", err)
	}
	proc := privateProc()
	if proc < 0 {
		return 0, nil, errors.New("clone into a user namespace: no procfs of our own to write its id maps through")
	}
	var spec, sync, report [2]int
	for _, p := range []*[2]int{&spec, &sync, &report} {
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return 0, nil, fmt.Errorf("pipe: %w", err)
		}
	}
	w := os.NewFile(uintptr(spec[1]), "spec")
	defer unix.Close(spec[0])
	defer unix.Close(sync[1])
	defer unix.Close(report[0])
	c := &userNSChild{x: x, specFd: spec[0], syncFd: sync[0], errFd: report[1]}
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old)
	pid, e := c.clone(unix.CLONE_NEWUSER | flags)
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	unix.Close(sync[0])
	unix.Close(report[1])
	if e != 0 {
		w.Close()
		return 0, nil, fmt.Errorf("clone into a user namespace: %w", e)
	}
	fail := func(err error) (int, *os.File, error) {
		_ = unix.Kill(pid, unix.SIGKILL)
		w.Close()
		return 0, nil, err
	}
	m := fmt.Sprintf("0 %d %d\n", u.HostID, u.Size)
	for _, f := range []string{"uid_map", "gid_map"} {
		fd, err := unix.Openat(proc, strconv.Itoa(pid)+"/"+f, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd, []byte(m))
			unix.Close(fd)
		}
		if err != nil {
			return fail(fmt.Errorf("clone into a user namespace: write %s: %w", f, err))
		}
	}
	if _, err := unix.Write(sync[1], []byte{1}); err != nil {
		return fail(fmt.Errorf("clone into a user namespace: %w", err))
	}
	var b [8]byte
	if n, _ := readFull(report[0], b[:]); n == len(b) {
		// It exits, and is reaped as the app's or enter's child.
		w.Close()
		return 0, nil, fmt.Errorf("clone into a user namespace: step %d: %w", b[0], unix.Errno(binary.LittleEndian.Uint32(b[4:])))
	}
	return pid, w, nil
}

// userNSChild is what the process cloneInUserNS clones does before its
// execve.
type userNSChild struct {
	x                     *preparedExec
	specFd, syncFd, errFd int
}

// The steps of userNSChild that may fail, in its report.
const (
	stepSync = 1 + iota
	stepIDs
	stepFds
	stepExecSelf
)

// clone clones the child; in the child it waits for its id maps, becomes
// its namespace's root, puts the spec pipe on SpecFd and execs. Raw
// system calls only, nosplit: the child has no other thread of the Go
// runtime, and its signals are blocked until the execve resets them.
//
//go:nosplit
//go:norace
func (c *userNSChild) clone(flags uintptr) (int, unix.Errno) {
	r1, _, e := unix.RawSyscall6(unix.SYS_CLONE, flags, 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if r1 != 0 {
		return int(r1), 0
	}
	var b [1]byte
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(c.syncFd), uintptr(unsafe.Pointer(&b[0])), 1)
		if e == unix.EINTR {
			continue
		}
		if e != 0 || n != 1 {
			childFail(c.errFd, stepSync, e, status.CodeStage1Failure)
		}
		break
	}
	// Root of the new namespace before its execve, so the execve leaves
	// it the namespace's full capabilities; otherwise it keeps the
	// host's uid 0, unmapped there, and the execve strips them all.
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, 0, 0, 0); e != 0 {
		childFail(c.errFd, stepIDs, e, status.CodeStage1Failure)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		childFail(c.errFd, stepIDs, e, status.CodeStage1Failure)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0); e != 0 {
		childFail(c.errFd, stepIDs, e, status.CodeStage1Failure)
	}
	if c.specFd == SpecFd {
		// Already there: it only has to stay open across the execve.
		if _, _, e := unix.RawSyscall(unix.SYS_FCNTL, SpecFd, unix.F_SETFD, 0); e != 0 {
			childFail(c.errFd, stepFds, e, status.CodeStage1Failure)
		}
	} else if _, _, e := unix.RawSyscall(unix.SYS_DUP3, uintptr(c.specFd), SpecFd, 0); e != 0 {
		childFail(c.errFd, stepFds, e, status.CodeStage1Failure)
	}
	x := c.x
	_, _, e = unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(x.path)),
		uintptr(unsafe.Pointer(&x.argv[0])), uintptr(unsafe.Pointer(&x.envv[0])))
	childFail(c.errFd, stepExecSelf, e, status.CodeStage1Failure)
	return 0, 0
}

// PrepareUserNS does, while still host root, what a user namespace's root
// may not: lowering the OOM score needs CAP_SYS_RESOURCE in the host's
// user namespace. The process then cloned inherits it. It returns the
// spec the process in the user namespace is to carry out.
func PrepareUserNS(s *Spec) (*Spec, error) {
	inner := *s
	if adj := s.Isolation.OOMScoreAdj; adj != nil {
		if err := writeProcSelf("oom_score_adj", strconv.Itoa(*adj)); err != nil {
			return nil, fmt.Errorf("isolator %s: %w", isoOOM, err)
		}
		inner.Isolation.OOMScoreAdj = nil
	}
	return &inner, nil
}

// childInUserNS is the app's process in its user namespace: its root is
// set up, it reads the spec and becomes the app.
func childInUserNS() int {
	runtime.LockOSThread()
	s, _, err := readSpec()
	if err != nil {
		logx.Errorf("app: %v", err)
		return status.CodeStage1Failure
	}
	code, err := func() (int, error) {
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return status.CodeStage1Failure, fmt.Errorf("prctl dumpable: %w", err)
		}
		unix.Umask(0o022)
		if os.Args[1] == userNSFlag {
			if _, err := unix.Setsid(); err != nil {
				return status.CodeStage1Failure, fmt.Errorf("setsid: %w", err)
			}
			if err := takeCtrlTTY(s); err != nil {
				return status.CodeStage1Failure, err
			}
		}
		return Exec(s, s.Exec)
	}()
	logx.Errorf("app %q: %v", s.Name, err)
	return code
}

// RunInUserNS runs argv in the app (enter): the calling process, already
// in the app's namespaces and root and host root, clones the command into
// a user namespace with the app's mapping, waits for it and returns its
// exit code (128+N for a signal). It stays as the command's parent, in the
// same process group, so what enter forwards to the group reaches the
// command; it ignores those signals itself.
func RunInUserNS(s *Spec, argv []string) (int, error) {
	const setupFailed = status.CodeStage1Failure
	inner, err := PrepareUserNS(s)
	if err != nil {
		return setupFailed, err
	}
	inner.Exec = argv
	// The command resets every disposition before its execve (Exec).
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	pid, w, err := cloneInUserNS(s.UserNS, enterUserNSFlag, 0)
	if err != nil {
		return setupFailed, err
	}
	// A command that died before reading: its exit status says why.
	_ = json.NewEncoder(w).Encode(inner)
	w.Close()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return setupFailed, fmt.Errorf("wait: %w", err)
		}
	}
	return status.FromWaitStatus(ws), nil
}
