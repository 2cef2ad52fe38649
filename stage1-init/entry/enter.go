package entry

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podpid"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/stage1-init/selfexe"
	"github.com/pod1/pod1/status"
)

const roleEnter = "enter"

// Default commands: rkt enter's, and the shell every image is likelier to
// have.
const (
	enterDefaultCmd  = "/bin/bash"
	enterFallbackCmd = "/bin/sh"
)

// enterExecFlag marks the second half of enter: the process forked
// inside the app, which becomes the command.
const enterExecFlag = "--pod1-exec-in-app"

// Where that process reads its orders, finds the apps' pid namespace,
// and reports the pid of the command it clones there (enter's child, by
// CLONE_PARENT).
const (
	enterExecFd   = 3
	enterPidNSFd  = 4
	enterReportFd = 5
)

// enterMain is the enter entry point (--pid=N --appname=NAME -- CMD...,
// cwd = the pod directory; contract §6). rkt runs it from its tree store,
// not from the pod, so nothing is located relative to argv[0].
//
// It runs CMD as a process of the app: in the pod's ipc, uts, net and pid
// namespaces (those of PID 1, whose host pid --pid gives), in the app's
// own mount namespace (which holds exactly the app's root and mounts), in
// the app's cgroups, in a session of its own, and made by appexec.Exec
// from the spec the app was made from: the same environment, working
// directory, credentials, capabilities, no_new_privs, seccomp filter and
// fds 0, 1 and 2 only. rkt's own enter gave entered processes more than
// the app had (CVE-2019-10144/10145/10147).
func enterMain(args []string) int {
	if len(args) > 0 && args[0] == enterExecFlag {
		return enterExecMain()
	}
	// The joined namespaces belong to this thread only; it must be the
	// one that forks the command, and must never run anything else.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	// Whatever the caller left open (rkt's lock fds among them) must not
	// reach into the pod (threats T1).
	if err := handover.CloseOnExecFrom3(); err != nil {
		return fail(fmt.Errorf("enter: close_range: %w", err))
	}
	// Nothing may ptrace us while we hold host fds (CVE-2016-9962).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("enter: prctl dumpable: %w", err))
	}
	podPid, app, appUser, cmd, err := parseEnterArgs(args)
	if err != nil {
		return fail(fmt.Errorf("enter: %w", err))
	}
	pid1, err := podpid.Verify(".", podPid)
	if err != nil {
		return fail(fmt.Errorf("enter: --pid=%d: %w", podPid, err))
	}
	defer pid1.Close()
	spec, err := loadSpec(app)
	if err != nil {
		return fail(fmt.Errorf("enter: app %q: %w", app, err))
	}
	if err := isolateEntered(spec, appUser); err != nil {
		return fail(fmt.Errorf("enter: app %q: %w", app, err))
	}
	spec.Env = withCallerTerm(spec.Env, os.Getenv("TERM"))
	rec, err := awaitStarted(app, startingWait)
	if err != nil {
		return fail(fmt.Errorf("enter: app %q: read record: %w", app, err))
	}
	if rec.State == status.StateRunning && rec.Pid <= 0 {
		return fail(fmt.Errorf("enter: app %q is still starting after %v", app, startingWait))
	}
	if rec.State != status.StateRunning || rec.Pid <= 0 {
		return fail(fmt.Errorf("enter: app %q is not running (%s)", app, rec.State))
	}
	if err := awaitExec(rec.Pid, 10*time.Second); err != nil {
		return fail(fmt.Errorf("enter: app %q: %w", app, err))
	}
	// Our own binary, reached while the host's view is ours: the child
	// runs it again from inside the app without looking anything up
	// there.
	exe, err := selfexe.OpenSelfDir()
	if err != nil {
		return fail(fmt.Errorf("enter: %w", err))
	}
	defer exe.Dir.Close()
	if err := joinCgroupsOf(rec.Pid); err != nil {
		return fail(fmt.Errorf("enter: app %q: %w", app, err))
	}
	pidNS, cgroupNS, err := joinApp(pid1, rec.Pid)
	if err != nil {
		return fail(fmt.Errorf("enter: app %q: %w", app, err))
	}
	defer pidNS.Close()
	if cgroupNS != nil {
		defer cgroupNS.Close()
	}
	p, report, err := spawnInApp(spec, cmd, exe, pidNS, cgroupNS)
	if err != nil {
		return fail(fmt.Errorf("enter: app %q: %w", app, err))
	}
	var target atomic.Int64
	target.Store(int64(p.Pid))
	go forwardSignals(sigs, &target)
	cmdPid := readPid(report)
	if cmdPid > 0 {
		target.Store(int64(cmdPid))
	}
	ps, err := p.Wait()
	if err != nil {
		return fail(fmt.Errorf("enter: app %q: wait: %w", app, err))
	}
	if cmdPid <= 0 {
		// It failed before it cloned the command, or ran it itself
		// (a user namespace) and ended with it.
		return status.FromWaitStatus(unix.WaitStatus(ps.Sys().(syscall.WaitStatus)))
	}
	// The command is our child (CLONE_PARENT), and its status ours.
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(cmdPid, &ws, 0, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return fail(fmt.Errorf("enter: app %q: wait: %w", app, err))
		}
	}
	return status.FromWaitStatus(ws)
}

// readPid reads the pid the child reports on r until r's end: 0 if none.
func readPid(r *os.File) int {
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 32))
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// withCallerTerm gives the entered command the caller's terminal type, as
// rkt's enter does (vt100 when the caller has none): it runs on the
// caller's terminal, not on the app's.
func withCallerTerm(env []string, term string) []string {
	if term == "" || len(term) > 256 {
		term = "vt100"
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TERM=") {
			out = append(out, kv)
		}
	}
	return append(out, "TERM="+term)
}

func parseEnterArgs(args []string) (pid int, app string, appUser bool, cmd []string, err error) {
	fs := flag.NewFlagSet("enter", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&pid, "pid", 0, "host pid of the pod's PID 1")
	fs.StringVar(&app, "appname", "", "the app to enter")
	fs.BoolVar(&appUser, enterAppUserFlag, false, "run as the app's user, not root (pod1 enter --user)")
	fs.Bool("debug", false, "log to stderr")
	if err := fs.Parse(args); err != nil {
		return 0, "", false, nil, fmt.Errorf("flags: %w", err)
	}
	if pid <= 1 {
		return 0, "", false, nil, fmt.Errorf("--pid=%d: want the host pid of the pod's PID 1", pid)
	}
	if _, err := types.NewACName(app); err != nil {
		return 0, "", false, nil, fmt.Errorf("--appname=%q: %w", app, err)
	}
	return pid, app, appUser, fs.Args(), nil
}

// enterAppUserFlag asks enter for the app's user instead of root. rkt's
// stage0 never passes it; `pod1 enter --user` does.
const enterAppUserFlag = "app-user"

// isolateEntered makes spec, read from a file PID 1 wrote, safe to build
// the command from. Its isolation, user namespace and user are replaced
// by the app's as only stage0 and the run entry point wrote them
// (podspec.AppTrusted): an app that reached the saved spec could have
// asked there for every capability and no filter. What is left of the
// file, the environment and working directory, gives nothing an app's
// own process could not have. The command runs as root, as rkt's enter
// ran it, unless appUser: root of the app's user namespace in a pod with
// one, and never with more than a root process of the app holds: the
// app's bounding set, filter and no_new_privs, in its cgroups.
func isolateEntered(spec *appexec.Spec, appUser bool) error {
	opts, err := loadOptions()
	if err != nil {
		return err
	}
	tr, err := podspec.AppTrusted(".", opts, spec.Name)
	if err != nil {
		return err
	}
	spec.Isolation, spec.UserNS = tr.Isolation, tr.UserNS
	spec.UID, spec.GID, spec.Groups = 0, 0, nil
	if appUser {
		spec.UID, spec.GID, spec.Groups = tr.UID, tr.GID, tr.Groups
	}
	return nil
}

// loadSpec reads the spec the run entry point saved for the app.
func loadSpec(app string) (*appexec.Spec, error) {
	b, err := safefile.ReadRegularIn(".", layout.AppSpec(app), layout.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	var s appexec.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if s.Name == "" {
		// The spec may be saved inside the app's supervision record.
		var wrapped struct {
			Spec appexec.Spec `json:"spec"`
		}
		if json.Unmarshal(b, &wrapped) == nil {
			s = wrapped.Spec
		}
	}
	if s.Name != app || !filepath.IsAbs(s.WorkingDir) {
		return nil, errors.New("saved spec does not describe the app")
	}
	return &s, nil
}

// enterOrders is what the child inside the app is told to become. Exe
// names the stage1 binary relative to the child's first cwd (selfDir).
type enterOrders struct {
	Spec *appexec.Spec `json:"spec"`
	Argv []string      `json:"argv"`
	Exe  string        `json:"exe"`
}

// spawnInApp forks, from the calling thread (already in the app's
// namespaces and root), a child that runs the stage1 binary again and
// becomes argv through appexec.Exec: the one function that makes every
// process of an app, the app's first included. The child is born in the
// pod's pid namespace, where the app's /proc shows it. It gets a session
// of its own: it cannot push input into the caller's terminal
// (CVE-2017-5226).
//
// The binary is not looked up in the app's tree, which the app may have
// changed as it likes (a volume or a mount over its /proc made enter run
// the app's own file as host root): the thread's cwd is exe.Dir, a
// detached read-only copy of the directory holding our binary, reached
// by no path, and the child executes exe.Name relative to it. Until the
// child enters the app's working directory, its cwd shows nothing but
// that read-only directory.
func spawnInApp(s *appexec.Spec, argv []string, exe *selfexe.SelfDir, pidNS, cgroupNS *os.File) (*os.Process, *os.File, error) {
	// No Pdeathsig: a command outliving enter stays in the app's
	// cgroups and dies with the app.
	sys := &syscall.SysProcAttr{Setsid: true}
	c := *s
	c.CgroupNS = cgroupNS != nil
	s = &c
	orders, err := json.Marshal(enterOrders{Spec: s, Argv: argv, Exe: exe.Name})
	if err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()
	rr, rw, err := os.Pipe()
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	defer rw.Close()
	if err := unix.Fchdir(int(exe.Dir.Fd())); err != nil {
		r.Close()
		rr.Close()
		return nil, nil, fmt.Errorf("enter the stage1 directory: %w", err)
	}
	// The command goes at once from its gate (appexec.GateFd): a pipe
	// with no writer, not a path of the app's, which it could have
	// made a FIFO that holds enter.
	gate, gw, err := os.Pipe()
	if err != nil {
		r.Close()
		rr.Close()
		return nil, nil, err
	}
	gw.Close()
	defer gate.Close()
	p, err := os.StartProcess(exe.Name, []string{roleEnter, enterExecFlag}, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, r, pidNS, rw, gate, cgroupNS}, // appexec.CgroupNSFd
		Sys:   sys,
	})
	r.Close()
	if err != nil {
		rr.Close()
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	// A child that died before reading gives EPIPE: its exit status
	// says why.
	_, _ = w.Write(orders)
	return p, rr, nil
}

// enterExecMain is the child: it reads its orders and becomes the
// command, or exits with the code a failed exec gets (127, 126, 254).
func enterExecMain() int {
	runtime.LockOSThread()
	// Nothing in the pod may look into us before we are the command.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("enter: prctl dumpable: %w", err))
	}
	f := os.NewFile(enterExecFd, "orders")
	b, err := io.ReadAll(io.LimitReader(f, 64<<20))
	f.Close()
	var o enterOrders
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	if err == nil && o.Spec == nil {
		err = errors.New("no spec")
	}
	if err != nil {
		return fail(fmt.Errorf("enter: read orders: %w", err))
	}
	// The app's own umask (appexec gives it 022), not the caller's.
	unix.Umask(0o022)
	o.Argv = enterCommand(o.Spec, o.Argv)
	if o.Spec.UserNS != nil {
		appexec.SelfExe = o.Exe
		// Cloned from here into the apps' pid namespace, where it
		// runs as the root of a user namespace of its own until it
		// becomes the command (appexec.RunInUserNS): nothing there
		// holds a capability over it.
		if err := unix.Setns(enterPidNSFd, unix.CLONE_NEWPID); err != nil {
			return fail(fmt.Errorf("enter: join the apps' pid namespace: %w", err))
		}
		if o.Spec.CgroupNS {
			if err := unix.Setns(appexec.CgroupNSFd, unix.CLONE_NEWCGROUP); err != nil {
				return fail(fmt.Errorf("enter: join the apps' cgroup namespace: %w", err))
			}
		}
		code, err := appexec.RunInUserNS(o.Spec, o.Argv)
		if err != nil {
			logx.Errorf("app %q: %v", o.Spec.Name, err)
		}
		return code
	}
	code, err := appexec.Launch(o.Spec, o.Argv, enterPidNSFd, false, func(pid int, execErr func() error) int {
		if pid <= 0 {
			logx.Errorf("app %q: %v", o.Spec.Name, execErr())
			return status.CodeStage1Failure
		}
		report := os.NewFile(enterReportFd, "report")
		if _, err := report.WriteString(strconv.Itoa(pid) + "\n"); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			return fail(fmt.Errorf("enter: report pid: %w", err))
		}
		report.Close()
		if err := execErr(); err != nil {
			logx.Errorf("app %q: %v", o.Spec.Name, err)
		}
		return 0
	})
	logx.Errorf("app %q: %v", o.Spec.Name, err)
	return code
}

// enterCommand picks the command: rkt's default /bin/bash becomes /bin/sh
// in an image without bash. The calling thread is in the app's root.
func enterCommand(s *appexec.Spec, argv []string) []string {
	if len(argv) == 0 {
		argv = []string{enterDefaultCmd}
	}
	if len(argv) == 1 && argv[0] == enterDefaultCmd {
		if _, err := os.Stat(enterDefaultCmd); err != nil {
			logx.Warnf("app %q has no %s, running %s", s.Name, enterDefaultCmd, enterFallbackCmd)
			argv = []string{enterFallbackCmd}
		}
	}
	return argv
}

// forwardSignals passes what the terminal or a supervisor sends enter on
// to the command's process group: in its own session, it is not in the
// terminal's foreground group.
func forwardSignals(sigs chan os.Signal, pid *atomic.Int64) {
	for sig := range sigs {
		_ = unix.Kill(-int(pid.Load()), sig.(unix.Signal))
	}
}

// awaitExec waits until the app's first process has become the app. The
// record says "running" from the clone on, while the process is still the
// stage1 (argv[0] pod1-app) setting up the app's mounts and root: joining
// its mount namespace then would land in the pod's, not the app's.
// startingWait bounds how long enter waits for an app that is starting:
// PID 1's own deadline for a user-namespace set-up's report.
const startingWait = 30 * time.Second

// awaitStarted reads the app's record until it names the app's process.
// An app in a user namespace is "running" without a pid while its set-up
// process works (supervisor's Starting): PID 1 no longer waits for the
// set-up, so enter does, as it did when PID 1's wait held everything up.
// It returns the last record read, which may still have no pid at the
// deadline, or one that is no longer running (the start failed or the
// app was stopped meanwhile).
func awaitStarted(app string, timeout time.Duration) (*status.Record, error) {
	deadline := time.Now().Add(timeout)
	for {
		rec, err := status.ReadRecord(layout.StatusDir, app)
		if err != nil || rec.State != status.StateRunning || rec.Pid > 0 || time.Now().After(deadline) {
			return rec, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func awaitExec(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return fmt.Errorf("its process %d is gone: %w", pid, err)
		}
		if arg0, _, _ := strings.Cut(string(b), "\x00"); arg0 != handover.RoleApp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its process %d did not start the app within %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
