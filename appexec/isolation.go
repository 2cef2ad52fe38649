package appexec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec/seccomp"
	"github.com/pod1/pod1/status"
)

// Isolation is what is put on an app's process last, just before execve:
// its capabilities, no_new_privs, system call filter and OOM score. The
// app's first process and every process enter starts in the app get it
// from the same Spec through the same function (Exec), so an
// entered process can never hold more than the app (rkt's enter did:
// CVE-2019-10144, 10145). The zero value is the most restrictive: no
// capabilities at all.
type Isolation struct {
	// Capabilities is the bounding set, by name; a root app's permitted
	// and effective sets are exactly this after execve, any other app's
	// are empty. Inheritable and ambient sets are always empty.
	Capabilities []string `json:"capabilities"`
	// UnrestrictedCapabilities keeps the stage1's own bounding set
	// (--disable-capabilities-restriction).
	UnrestrictedCapabilities bool `json:"unrestrictedCapabilities,omitempty"`
	// NoNewPrivileges sets no_new_privs: execve can no longer grant
	// privileges (setuid bits, file capabilities).
	NoNewPrivileges bool `json:"noNewPrivileges,omitempty"`
	// Seccomp is the system call filter; nil for none (--disable-seccomp
	// or a retain-set of @appc.io/all).
	Seccomp *seccomp.Filter `json:"seccomp,omitempty"`
	// OOMScoreAdj, when set, is written to /proc/self/oom_score_adj.
	OOMScoreAdj *int `json:"oomScoreAdj,omitempty"`
}

// Isolator names, for messages.
const (
	isoCaps    = "os/linux/capabilities"
	isoNNP     = "os/linux/no-new-privileges"
	isoSeccomp = "os/linux/seccomp"
	isoOOM     = "os/linux/oom-score-adj"
)

// isolate gives the calling thread the app's credentials and isolation,
// all but the seccomp filter, which it compiles and returns for
// installAndExec. The order matters: OOM score (lowering it needs
// CAP_SYS_RESOURCE); the open-file limit; the bounding set (dropping needs
// CAP_SETPCAP); groups, gid and uid, keeping the permitted set across the
// uid change; effective = permitted, inheritable and ambient emptied;
// no_new_privs; every fd above 2 close-on-exec; signals reset. The filter
// comes after all of it so that it never has to allow the stage1's own
// calls.
func isolate(s *Spec) (*unix.SockFprog, error) {
	iso := &s.Isolation
	var fp *unix.SockFprog
	if iso.Seccomp != nil {
		prog, err := iso.Seccomp.Assemble()
		if err != nil {
			return nil, fmt.Errorf("isolator %s-%s-set: %w", isoSeccomp, setName(iso.Seccomp), err)
		}
		fp = &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	}
	if iso.OOMScoreAdj != nil {
		if err := writeProcSelf("oom_score_adj", fmt.Sprint(*iso.OOMScoreAdj)); err != nil {
			return nil, fmt.Errorf("isolator %s: %w", isoOOM, err)
		}
	}
	restoreNofile()
	kept, err := applyCapabilities(iso.Capabilities, iso.UnrestrictedCapabilities)
	if err != nil {
		return nil, fmt.Errorf("isolator %s: %w", isoCaps, err)
	}
	if err := setCredentials(s); err != nil {
		return nil, err
	}
	if err := finishCapabilities(kept, iso.UnrestrictedCapabilities); err != nil {
		return nil, fmt.Errorf("isolator %s: %w", isoCaps, err)
	}
	if iso.NoNewPrivileges {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("isolator %s: %w", isoNNP, err)
		}
	}
	// Every fd but 0, 1 and 2 closes at execve, whatever opened it (the
	// Go runtime's own included): no host fd reaches the app
	// (CVE-2024-21626, threats T1).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, fmt.Errorf("close_range: %w", err)
	}
	resetSignals()
	return fp, nil
}

func setName(f *seccomp.Filter) string {
	if f.Mode == seccomp.ModeAllow {
		return "retain"
	}
	return "remove"
}

// Exec makes the calling process the command argv of the app: it applies
// the app's isolation (isolate, then the seccomp filter) and execs, after
// command. It serves a process that is the app's already: one in the
// app's user namespace and the apps' pid namespace, which Launch cloned
// (--private-users); Launch is the way otherwise.
//
// The caller must be the process that is to become the command, on a
// thread locked with runtime.LockOSThread, still root with its
// capabilities (its user namespace's), in the app's namespaces and root,
// in a session of its own if it wants one. It returns only on failure,
// with the exit code to report: 127 when the executable does not exist,
// 126 when it cannot be executed, 254 when the isolation could not be
// applied; the process must then exit.
func Exec(s *Spec, argv []string) (int, error) {
	const setupFailed = status.CodeStage1Failure
	c, code, err := command(s, argv)
	if err != nil {
		return code, err
	}
	// From here to execve nothing may allocate: a garbage collection
	// could park this thread in futex(2), which a strict allow-list
	// refuses.
	debug.SetGCPercent(-1)
	fp, err := isolate(s)
	if err != nil {
		return setupFailed, err
	}
	installed, e := installAndExec(fp, c.x)
	runtime.KeepAlive(fp)
	runtime.KeepAlive(c.x)
	if !installed {
		return setupFailed, fmt.Errorf("isolator %s-%s-set: seccomp(SET_MODE_FILTER): %w", isoSeccomp, setName(s.Isolation.Seccomp), e)
	}
	return execCode(e), execError(c.argv0, c.missing, e)
}

// preparedCommand is argv of the app, found and checked, ready for execve.
type preparedCommand struct {
	argv0   string
	missing string // what a failed exec of argv0 misses (missingFile)
	x       *preparedExec
}

// command enters the app's working directory, finds argv[0] in the app's
// PATH and checks it (notOnProcfs); on failure it returns the code to
// report.
func command(s *Spec, argv []string) (*preparedCommand, int, error) {
	const setupFailed = status.CodeStage1Failure
	if len(argv) == 0 {
		return nil, setupFailed, errors.New("exec: empty command")
	}
	if err := chdirChecked(s.WorkingDir); err != nil {
		return nil, setupFailed, err
	}
	argv0, err := lookPath(argv[0], s.Env)
	if err != nil {
		return nil, execCode(err), fmt.Errorf("exec %s: %w", argv[0], err)
	}
	missing := missingFile(argv0)
	if err := notOnProcfs(argv0); err != nil {
		return nil, execCode(err), execError(argv0, missing, err)
	}
	x, err := prepareExec(argv0, argv, s.Env)
	if err != nil {
		return nil, setupFailed, fmt.Errorf("exec %s: %w", argv0, err)
	}
	return &preparedCommand{argv0: argv0, missing: missing, x: x}, 0, nil
}

// execError words a failed exec of argv0: a missing file as rkt's stage1
// says it, naming the file (missing, found before the exec); anything else
// as execve's error.
func execError(argv0, missing string, err error) error {
	if errors.Is(err, unix.ENOENT) && missing != "" {
		return &notFoundError{path: missing, exe: argv0}
	}
	if errors.Is(err, unix.ENOENT) {
		err = fmt.Errorf("%w (or its interpreter)", err)
	}
	return fmt.Errorf("exec %s: %w", argv0, err)
}

// preparedExec holds execve's arguments, built before the filter is in.
type preparedExec struct {
	path       *byte
	argv, envv []*byte
}

func prepareExec(path string, argv, env []string) (*preparedExec, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	a, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return nil, err
	}
	e, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return nil, err
	}
	return &preparedExec{p, a, e}, nil
}

// installAndExec loads the seccomp filter (if any) on the calling thread
// and execs, with nothing in between that the Go runtime could turn into a
// system call of its own: the two calls are raw, and the function is
// nosplit, so the goroutine cannot be preempted here (a preempted
// goroutine on a locked thread parks the thread in futex(2), which a
// strict allow-list kills). It reports whether the filter went in, and the
// errno of whatever failed.
//
// The filter is not synchronised to the process's other threads (no
// TSYNC): they are the Go runtime's, which a strict allow-list would
// break, and they vanish at this execve; the filter stays with the thread
// that execs. The kernel takes it from a thread that has no_new_privs set
// or CAP_SYS_ADMIN, which finishCapabilities left in the effective set.
//
//go:nosplit
func installAndExec(fp *unix.SockFprog, x *preparedExec) (installed bool, err unix.Errno) {
	if fp != nil {
		_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(fp)))
		if e != 0 {
			return false, e
		}
	}
	_, _, e := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(x.path)),
		uintptr(unsafe.Pointer(&x.argv[0])), uintptr(unsafe.Pointer(&x.envv[0])))
	return true, e
}

// restoreNofile gives back the RLIMIT_NOFILE soft limit this process
// started with, which is the app's: Go raises it at startup and restores
// it only inside syscall.Exec (go.dev/issue/46279). Exec with an empty path
// performs that restore (and forgets the saved value) and then fails in
// execve with ENOENT before the kernel touches the process; the real
// execve follows without the setrlimit a filter might refuse.
func restoreNofile() {
	_ = syscall.Exec("", nil, nil)
}

// notOnProcfs refuses an executable that is not a file of the app's own
// tree: an image's /bin/app -> /proc/self/exe (a magic link) would run the
// binary of the stage1 process doing the exec, and a script whose
// interpreter is such a link or anything under /proc the same
// (CVE-2019-5736, threats T3). The path is resolved in the app's root,
// which is ours by now, following ordinary symlinks only.
func notOnProcfs(p string) error {
	for depth := 0; depth < 4; depth++ {
		interp, err := checkExecutable(p)
		if err != nil || interp == "" {
			return err
		}
		p = interp
	}
	return fmt.Errorf("interpreters nested too deep: %w", unix.ELOOP)
}

// checkExecutable checks one executable and returns the interpreter its
// "#!" line names, if any.
func checkExecutable(p string) (string, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
	if errors.Is(err, unix.ELOOP) {
		return "", fmt.Errorf("%s resolves through a /proc link: %w", p, unix.EACCES)
	}
	if errors.Is(err, unix.ENOENT) && entersProc(p) {
		return "", fmt.Errorf("%s resolves into /proc: %w", p, unix.EACCES)
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil {
		return "", err
	}
	if sf.Type == unix.PROC_SUPER_MAGIC {
		return "", fmt.Errorf("%s resolves into /proc: %w", p, unix.EACCES)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", err // execve gives its own answer
	}
	// Reopened through the descriptor: the very file checked.
	rfd, err := reopen(fd, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return "", nil // not readable: execve decides
	}
	defer unix.Close(rfd)
	buf := make([]byte, 256)
	n, _ := unix.Read(rfd, buf)
	line, ok := strings.CutPrefix(string(buf[:max(n, 0)]), "#!")
	if !ok {
		return "", nil
	}
	line, _, _ = strings.Cut(line, "\n")
	if f := strings.Fields(line); len(f) > 0 {
		return f[0], nil
	}
	return "", nil
}

// entersProc reports whether resolving p, in our root (the app's), walks
// into /proc. The app's /proc is of the apps' pid namespace, where the
// set-up process has no pid: /proc/self and its like resolve to nothing
// for it (ENOENT), and to the process itself for the app's process that
// would exec them. The walk is the kernel's, component by component: a
// symlink's target replaces it, ".." after a resolved directory is its
// real parent.
func entersProc(p string) bool {
	resolved, todo := "/", p
	for hops := 0; todo != "" && hops <= 40; {
		comp, rest, _ := strings.Cut(strings.TrimLeft(todo, "/"), "/")
		todo = rest
		if comp == "" || comp == "." {
			continue
		}
		next := path.Join(resolved, comp)
		if next == "/proc" || strings.HasPrefix(next, "/proc/") {
			return true
		}
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			return false
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			resolved = next
			continue
		}
		target, err := os.Readlink(next)
		if err != nil {
			return false
		}
		hops++
		if path.IsAbs(target) {
			resolved = "/"
		}
		todo = target + "/" + todo
	}
	return false
}

// writeProcSelf writes data to the calling process's /proc/self/<name>.
// It goes through a procfs instance of its own, mounted detached for the
// purpose, which no mount in the app's namespace can cover: in the mount
// namespace of a running app (enter), an app with CAP_SYS_ADMIN could have
// laid another procfs file over the path, which a check of the file system
// type alone does not catch (CVE-2025-52881, threats T7). Where the kernel
// refuses a private instance, the shared /proc is used, checked.
func writeProcSelf(name, data string) error {
	if privateProc() < 0 {
		return writeProcFile("/proc/self/"+name, data)
	}
	fd, err := openProcSelf(name, unix.O_WRONLY|unix.O_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("open /proc/self/%s: %w", name, err)
	}
	defer unix.Close(fd)
	return writeProcFd(fd, "/proc/self/"+name, data)
}

// writeProcFile writes to a file that must be on procfs: an image or a
// volume could put a tmpfs at /proc, and writes meant for the kernel would
// then succeed into a plain file (CVE-2019-16884, threats T7).
func writeProcFile(path, data string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	return writeProcFd(fd, path, data)
}

func writeProcFd(fd int, path, data string) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("fstatfs %s: %w", path, err)
	}
	if st.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("%s is not on procfs (type %#x)", path, st.Type)
	}
	if _, err := unix.Write(fd, []byte(data)); err != nil {
		return fmt.Errorf("write %q to %s: %w", data, path, err)
	}
	return nil
}
