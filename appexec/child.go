package appexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
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
		// A spare whose PID 1 died before handing it an app (run
		// aborted the pod): the failure was reported by run.
		return status.CodeStage1Failure
	}
	if err != nil {
		logx.Errorf("app: %v", err)
		return status.CodeStage1Failure
	}
	// On the app's stderr from here on (its log): what PID 1 logs of
	// the app is on the pod's.
	logx.Debugf("app %q: setting up, then exec %q", spec.Name, spec.Exec)
	code, err := become(spec)
	if err != nil {
		logx.Errorf("app %q: %v", spec.Name, err)
	}
	return code
}

// errNoSpec is an empty spec pipe: the writer went away without a word.
var errNoSpec = errors.New("no spec")

func readSpec() (*Spec, error) {
	first, err := recvStdio()
	if err != nil {
		return nil, err
	}
	f := os.NewFile(SpecFd, "spec")
	defer f.Close()
	rest, err := io.ReadAll(io.LimitReader(f, maxSpecSize))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	b := append(first, rest...)
	if len(b) == 0 {
		return nil, errNoSpec
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	return &s, nil
}

// stdioRights is how many descriptors may come with the spec: the app's
// stdin, stdout and stderr.
const stdioRights = 3

// recvStdio reads the first part of the spec. When SpecFd is a socket
// (a process started before its app was known, stage1-init's spare), the
// app's stdin, stdout and stderr may come with it, and replace ours;
// on a pipe there is nothing to receive and the spec is read as it is.
func recvStdio() ([]byte, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(stdioRights*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(SpecFd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOTSOCK):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("read spec: %w", err)
		}
		if oobn > 0 {
			if err := takeStdio(oob[:oobn]); err != nil {
				return nil, err
			}
		}
		return buf[:n], nil
	}
}

func takeStdio(oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("read spec: control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fmt.Errorf("read spec: control message: %w", err)
		}
		fds = append(fds, got...)
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) != stdioRights {
		return fmt.Errorf("read spec: got %d descriptors with it, want %d", len(fds), stdioRights)
	}
	for i, fd := range fds {
		if err := unix.Dup3(fd, i, 0); err != nil {
			return fmt.Errorf("read spec: take descriptor %d: %w", i, err)
		}
	}
	return nil
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
	if err := setupRoot(s); err != nil {
		return setupFailed, err
	}
	unix.Umask(0o022)
	if s.UserNS != nil {
		return startInUserNS(s)
	}
	// A session of its own: the app has no controlling terminal it could
	// push input into (TIOCSTI, CVE-2017-5226), and the pod can signal
	// the app's whole process group.
	if _, err := unix.Setsid(); err != nil {
		return setupFailed, fmt.Errorf("setsid: %w", err)
	}
	if err := takeCtrlTTY(s); err != nil {
		return setupFailed, err
	}
	return Exec(s, s.Exec)
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
// (bench/profile.md).
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
