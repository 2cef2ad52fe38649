package appexec

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

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

// ReportFd is where the setup process of an app in a user namespace
// writes the pid of the app's process, in decimal; nothing (EOF) means it
// failed, and its own exit status says why.
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
// its spec from. Only fds 0-2 and that pipe reach it: every other fd is
// made close-on-exec first. /proc may be the app's by now (the pod's pid
// namespace); our own binary is still reached through the magic link.
func cloneInUserNS(u *idmap.Range, flag string, flags uintptr) (int, *os.File, error) {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, nil, fmt.Errorf("close_range: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer r.Close()
	pid, err := syscall.ForkExec(SelfExe, []string{"pod1-app", flag}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{0, 1, 2, r.Fd()},
		Sys:   userNSAttr(u, flags),
	})
	if err != nil {
		w.Close()
		return 0, nil, fmt.Errorf("clone into a user namespace: %w", err)
	}
	return pid, w, nil
}

// userNSAttr is how a process is cloned into a new user namespace with
// the pod's mapping, written by us (host root) before it runs. setgroups
// stays allowed: the app's supplementary groups are mapped ids.
func userNSAttr(u *idmap.Range, flags uintptr) *syscall.SysProcAttr {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(u.HostID), Size: int(u.Size)}}
	return &syscall.SysProcAttr{
		// Root of the new namespace before its execve, so the execve
		// leaves it the namespace's full capabilities for the steps
		// ahead; otherwise it keeps the host's uid 0, unmapped there,
		// and the execve strips every capability.
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Cloneflags:                 unix.CLONE_NEWUSER | flags,
		UidMappings:                m,
		GidMappings:                m,
		GidMappingsEnableSetgroups: true,
	}
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
