package appexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/status"
)

// SpecFd is the descriptor on which the child reads its Spec.
const SpecFd = 3

// maxSpecSize bounds the Spec a child accepts.
const maxSpecSize = 32 << 20

// Child is the whole life of the child process: it reads its Spec from
// SpecFd and becomes the app. It returns only on failure, with the exit
// code the app's status must record: 127 when the executable does not
// exist, 126 when it cannot be executed, 254 when the pod could not set up
// the app (the message on stderr says which).
func Child() int {
	if len(os.Args) > 1 && (os.Args[1] == userNSFlag || os.Args[1] == enterUserNSFlag) {
		return childInUserNS()
	}
	// Credentials, capabilities and the final execve are per-thread
	// operations: everything happens on the main thread.
	runtime.LockOSThread()
	spec, err := readSpec()
	if errors.Is(err, errNoSpec) {
		// PID 1 closed the pipe without a spec: the app is not to
		// run (its cgroup could not be had, or the pod stops), and
		// PID 1 says why.
		return status.CodeStage1Failure
	}
	if err != nil {
		logx.Errorf("app: %v", err)
		return status.CodeStage1Failure
	}
	code, err := become(spec)
	if err != nil {
		logx.Errorf("app %q: %v", spec.Name, err)
	}
	return code
}

// errNoSpec is an empty spec pipe: the writer went away without a word.
var errNoSpec = errors.New("no spec")

// readSpec reads the Spec, to the pipe's end.
func readSpec() (*Spec, error) {
	f := os.NewFile(SpecFd, "spec")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpecSize))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if len(b) == 0 {
		return nil, errNoSpec
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	return &s, nil
}

// readFull reads len(b) bytes from fd unless it ends first, and returns
// how many it read.
func readFull(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Read(fd, b[n:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return n, err
		case m == 0:
			return n, nil
		}
		n += m
	}
	return n, nil
}

// become sets the app up and execs it; it returns only on failure.
func become(s *Spec) (int, error) {
	const setupFailed = status.CodeStage1Failure
	// A process in the pod that could ptrace us now would see the fds
	// we still hold (CVE-2016-9962); the kernel resets this at execve.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return setupFailed, fmt.Errorf("prctl dumpable: %w", err)
	}
	unix.Umask(0)
	err := setupRoot(s)
	unix.Umask(0o022)
	// On the app's stderr from here on (its log): what PID 1 logs of
	// the app is on the pod's.
	logx.Debugf("app %q: set up, exec %q", s.Name, s.Exec)
	if err != nil {
		return setupFailed, err
	}
	if err := reopenConsole(s); err != nil {
		return setupFailed, err
	}
	if s.UserNS != nil {
		if err := joinAppsPidNS(PidNSFd); err != nil {
			return setupFailed, err
		}
		if err := joinAppsCgroupNS(s); err != nil {
			return setupFailed, err
		}
		return startInUserNS(s)
	}
	// The app's process gets a session of its own (Launch): it has no
	// controlling terminal it could push input into (TIOCSTI,
	// CVE-2017-5226), and the pod can signal its whole process group.
	return Launch(s, s.Exec, PidNSFd, s.CtrlTTY, func(pid int, execErr func() error) int {
		if pid <= 0 {
			logx.Errorf("app %q: %v", s.Name, execErr())
			return setupFailed
		}
		if err := reportPid(pid); err != nil {
			// PID 1 is not listening: the app's process must not
			// run unsupervised.
			_ = unix.Kill(pid, unix.SIGKILL)
			logx.Errorf("app %q: %v", s.Name, err)
			return setupFailed
		}
		// The app's process is PID 1's now, and its exit status says
		// how it ended; execErr says why, on the app's stderr.
		if err := execErr(); err != nil {
			logx.Errorf("app %q: %v", s.Name, err)
		}
		return 0
	})
}

// reportPid tells PID 1, on ReportFd, the pid of the app's process.
func reportPid(pid int) error {
	report := os.NewFile(ReportFd, "report")
	defer report.Close()
	if _, err := report.WriteString(strconv.Itoa(pid) + "\n"); err != nil {
		return fmt.Errorf("report pid: %w", err)
	}
	return nil
}

func execCode(err error) int {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return status.CodeExecNotFound
	}
	return status.CodeExecNotPermitted
}

// chdirChecked enters the working directory and verifies the kernel agrees
// it is inside our root: a cwd outside the root reads as "(unreachable)"
// or fails (runc's verifyCwd, CVE-2024-21626).
func chdirChecked(wd string) error {
	if err := unix.Chdir(wd); err != nil {
		return fmt.Errorf("working directory %s: %w", wd, err)
	}
	cwd, err := unix.Getwd()
	if err != nil || !strings.HasPrefix(cwd, "/") {
		return fmt.Errorf("working directory %s is outside the app's root", wd)
	}
	return nil
}

// lookPath finds a command without a slash in the app's PATH; the root is
// already the app's, so every lookup stays inside it.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	var firstErr error
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			if err := unix.Access(p, unix.X_OK); err == nil {
				return p, nil
			} else if firstErr == nil {
				firstErr = err
			}
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", fmt.Errorf("not found in PATH %q: %w", pathEnv, unix.ENOENT)
}

// setCredentials sets the groups, gid and uid. The thread keeps its
// permitted capabilities across the uid change (finishCapabilities decides
// what remains); the kernel clears the keep-caps flag again at execve.
//
// Like setgroups and prctl, the gid and uid changes are made on this
// thread only, with the raw system calls: this is the thread that execs
// the app, and execve kills every other thread of the process, so only its
// credentials ever reach the app. syscall.Setresuid and Setresgid (which
// x/sys/unix calls) change every thread of the Go runtime instead, by
// signalling each one and waiting for it, on every app start
// (docs/design-start.md).
func setCredentials(s *Spec) error {
	if err := unix.Setgroups(s.Groups); err != nil {
		return fmt.Errorf("setgroups %v: %w", s.Groups, err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(s.GID), uintptr(s.GID), uintptr(s.GID)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", s.GID, e)
	}
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl keepcaps: %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(s.UID), uintptr(s.UID), uintptr(s.UID)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", s.UID, e)
	}
	return unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0)
}

// resetSignals gives the app an empty signal mask and default dispositions:
// execve keeps the mask and ignored signals, and an init's leak into its
// apps is a classic bug (tini's sigconf test, threats P6).
func resetSignals() {
	var empty unix.Sigset_t
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &empty, nil)
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		// struct kernel_sigaction: handler, flags, restorer, mask.
		var act [4]uint64 // handler 0 == SIG_DFL
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptrOf(&act), 0, 8, 0, 0)
	}
}

// takeCtrlTTY makes fd 0 the controlling terminal of the new session when
// the spec asks (rkt's tty stdin): the app's own pseudo-terminal, whose
// master only PID 1 holds, so input pushed into it reaches only the app.
func takeCtrlTTY(s *Spec) error {
	if !s.CtrlTTY {
		return nil
	}
	if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, 0); err != nil {
		return fmt.Errorf("controlling terminal: %w", err)
	}
	return nil
}
