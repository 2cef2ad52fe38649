package appexec

import (
	"encoding/binary"
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
	spec, g, err := readSpec()
	if errors.Is(err, errNoSpec) {
		// A spare whose PID 1 died before handing it an app (run
		// aborted the pod): the failure was reported by run.
		return status.CodeStage1Failure
	}
	if err != nil {
		logx.Errorf("app: %v", err)
		return status.CodeStage1Failure
	}
	code, err := become(spec, g)
	if errors.Is(err, errNoSpec) {
		// A spare set up and never let go: its app was not to run.
		return status.CodeStage1Failure
	}
	if err != nil {
		logx.Errorf("app %q: %v", spec.Name, err)
	}
	return code
}

// errNoSpec is an empty spec pipe, or a spare's socket closed before its
// app was let go: the writer went away without a word.
var errNoSpec = errors.New("no spec")

// readSpec reads the Spec: to the pipe's end, or, on a spare's socket, as
// the first of its two messages (SpareBrief), with the gate the second
// one opens.
func readSpec() (*Spec, *gate, error) {
	var st unix.Stat_t
	if err := unix.Fstat(SpecFd, &st); err != nil {
		return nil, nil, fmt.Errorf("read spec: %w", err)
	}
	var b []byte
	var g *gate
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		if b, err = readBrief(SpecFd); err != nil {
			return nil, nil, err
		}
		g = &gate{fd: SpecFd}
	} else {
		f := os.NewFile(SpecFd, "spec")
		defer f.Close()
		if b, err = io.ReadAll(io.LimitReader(f, maxSpecSize)); err != nil {
			return nil, nil, fmt.Errorf("read spec: %w", err)
		}
	}
	if len(b) == 0 {
		return nil, nil, errNoSpec
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, nil, fmt.Errorf("decode spec: %w", err)
	}
	return &s, g, nil
}

// A spare (PID 1's app process started before its app is known)
// learns its app in two messages on its socket. The brief, sent as soon as
// PID 1 has its configuration, is the Spec's length (4 bytes, big-endian)
// and the Spec: the spare sets the app's root up while PID 1 still sets up
// its own. The go, sent when the app starts, is one byte (GoByte) with the
// app's stdin, stdout and stderr attached, and only after it may anything
// of the app run: PID 1 sends it once it has left the host's root (until
// then an app that may read /proc/1/root would find the host's: threats
// T4, T19) and the spare is in the app's cgroup.
const (
	briefHeader = 4
	// GoByte is the go message's byte.
	GoByte = 'g'
)

// SpareBrief frames spec as a spare's brief.
func SpareBrief(spec []byte) []byte {
	b := make([]byte, briefHeader, briefHeader+len(spec))
	binary.BigEndian.PutUint32(b, uint32(len(spec)))
	return append(b, spec...)
}

// readBrief reads a brief from the socket fd, and not a byte more: the go
// message that may follow it carries descriptors, which a read running
// into it would drop.
func readBrief(fd int) ([]byte, error) {
	var hdr [briefHeader]byte
	n, err := readHeader(fd, hdr[:])
	switch {
	case err != nil:
		return nil, fmt.Errorf("read spec: %w", err)
	case n == 0:
		return nil, errNoSpec
	case n < briefHeader:
		return nil, fmt.Errorf("read spec: %d bytes of its length", n)
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size == 0 || size > maxSpecSize {
		return nil, fmt.Errorf("read spec: length %d", size)
	}
	b := make([]byte, size)
	if n, err = readFull(fd, b); err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	} else if n < len(b) {
		return nil, fmt.Errorf("read spec: %d of its %d bytes", n, size)
	}
	return b, nil
}

// readHeader reads a brief's header, and the descriptors that come with
// it (SpareBriefRights): the spare was started before PID 1 had them.
func readHeader(fd int, hdr []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, hdr, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_WAITALL)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for i := range msgs {
					if fds, err := unix.ParseUnixRights(&msgs[i]); err == nil {
						if (len(fds) == 3 || len(fds) == 4) && appsProcFd < 0 {
							appsProcFd, appsPidNS, podShmFd = fds[0], fds[1], fds[2]
							if len(fds) == 4 {
								// Over the placeholder the
								// spare was born with.
								if err := unix.Dup3(fds[3], CgroupNSFd, 0); err != nil {
									return 0, fmt.Errorf("the apps' cgroup namespace: %w", err)
								}
							}
							fds = fds[3:]
						}
						for _, f := range fds {
							unix.Close(f)
						}
					}
				}
			}
		}
		if n == 0 || n == len(hdr) {
			return n, nil
		}
		m, err := readFull(fd, hdr[n:])
		return n + m, err
	}
}

// SpareBriefRights are the descriptors a spare's brief carries: a
// detached procfs of the apps' pid namespace, the namespace, a detached
// copy of the pod's /dev/shm, and the apps' cgroup namespace unless
// cgroupNS is -1 (there is none: Spec.CgroupNS).
func SpareBriefRights(procfs, pidns, shm, cgroupNS int) []byte {
	if cgroupNS < 0 {
		return unix.UnixRights(procfs, pidns, shm)
	}
	return unix.UnixRights(procfs, pidns, shm, cgroupNS)
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

// gate is a spare's wait for its go message.
type gate struct{ fd int }

// wait blocks until the go message comes, and makes the descriptors it
// carries our stdin, stdout and stderr. errNoSpec: the socket was closed
// first (the app is not to run: the pod stops, or it starts otherwise).
func (g *gate) wait() error {
	defer unix.Close(g.fd)
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(stdioRights*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(g.fd, b[:], oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the go: %w", err)
		}
		if n == 0 && oobn == 0 {
			return errNoSpec
		}
		if n != 1 || b[0] != GoByte || oobn == 0 {
			return fmt.Errorf("wait for the go: got %d bytes (%q) and %d of descriptors", n, b[:n], oobn)
		}
		return takeStdio(oob[:oobn])
	}
}

// stdioRights is how many descriptors come with a spare's go: the app's
// stdin, stdout and stderr, and its gate (GateFd).
const stdioRights = 4

// takeStdio makes the descriptors of a go's control message our stdin,
// stdout and stderr.
func takeStdio(oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("go: control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fmt.Errorf("go: control message: %w", err)
		}
		fds = append(fds, got...)
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) != stdioRights {
		return fmt.Errorf("go: got %d descriptors with it, want %d", len(fds), stdioRights)
	}
	for i, fd := range fds {
		to := i
		if i == 3 {
			to = GateFd
		}
		if err := unix.Dup3(fd, to, 0); err != nil {
			return fmt.Errorf("go: take descriptor %d: %w", i, err)
		}
	}
	return nil
}

// become sets the app up and execs it; it returns only on failure. A
// spare (g not nil) sets the root up, then waits for its go before
// anything else: what failed is told after it, on the app's stderr, which
// comes with it.
func become(s *Spec, g *gate) (int, error) {
	const setupFailed = status.CodeStage1Failure
	// A process in the pod that could ptrace us now would see the fds
	// we still hold (CVE-2016-9962); the kernel resets this at execve.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return setupFailed, fmt.Errorf("prctl dumpable: %w", err)
	}
	unix.Umask(0)
	err := setupRoot(s)
	unix.Umask(0o022)
	dropPodShm()
	if g != nil {
		if gerr := g.wait(); gerr != nil {
			return setupFailed, gerr
		}
	}
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
		if err := joinAppsPidNS(appsPidNS); err != nil {
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
	return Launch(s, s.Exec, appsPidNS, s.CtrlTTY, func(pid int, execErr func() error) int {
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
