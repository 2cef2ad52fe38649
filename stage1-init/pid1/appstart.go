package pid1

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podattach"
	"github.com/pod1/pod1/podlog"
	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/procstat"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/supervisor"
)

// Start begins a run of the app: a fresh cgroup is made for the run, the
// first process is cloned in a mount namespace of its own and moved into
// the cgroup; Started then hands it its spec (it does nothing before
// reading it, so it cannot fork outside); the child (appexec.Child) does
// the rest.
//
// CLONE_INTO_CGROUP would save the move, but on 6.x kernels a process
// cloned into a cgroup that was ever written "1" to cgroup.kill can be
// killed at birth (the kill sequence is compared across cgroups), which
// is every restart's case.
func (o *appOS) Start(a *supervisor.App) (p supervisor.Proc, err error) {
	defer func() {
		if err != nil {
			// The run that never was has nothing to attach to.
			o.attach.End(a.Name)
		}
	}()
	r := o.resOf(a)
	// The app's own process gets its sockets (socket activation).
	ps, listen := a.Cfg.MainSpec(phaseSpec(a), a.Phase() == supervisor.PhaseMain)
	ps = o.runSpec(a, ps)
	// The spare's mount namespace is older than PID 1's root: it holds
	// none of the binds StageBinds names, and a host mount at one of
	// their paths is not to be taken off.
	var spareSpec []byte
	if o.spare != nil {
		if spareSpec, err = json.Marshal(ps); err != nil {
			return p, err
		}
	}
	ps.StageBinds = stageBinds
	spec, err := json.Marshal(ps)
	if err != nil {
		return p, err
	}
	if err := o.ensureCgroup(a, r); err != nil {
		// The app's cgroup holds its device allow-list, its pids.max
		// and the limits the pod manifest asks for: none is optional,
		// and an app does not run without them.
		return p, fmt.Errorf("cgroup: %w", err)
	}
	stdio, closeStdio, err := o.stdio(a)
	if err != nil {
		return p, fmt.Errorf("stdio: %w", err)
	}
	// The set-up process reports the pid of the app's process it
	// clones into the apps' pid namespace, PID 1's child; its exit is
	// kept from before its pid is known (Adopt).
	o.reaper.Expect()
	if sp := o.takeSpare(a, r, spareSpec); sp != nil {
		r.pending = pendingStart{pw: sp.spec, spec: spareSpec, stdio: &stdio, gate: o.gateFor(), closeStdio: closeStdio}
		o.awaitReport(a, r, sp.report)
		// Moved into a's cgroup already when admitSpare did.
		return o.admit(a, r, sp.pid, sp.in == a)
	}
	fail := func(err error, files ...*os.File) (supervisor.Proc, error) {
		o.reaper.Unexpect()
		for _, f := range files {
			f.Close()
		}
		closeStdio()
		return supervisor.Proc{}, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		return fail(err, pr, pw)
	}
	attr := &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}
	// syscall.ForkExec, not os.StartProcess: the latter's first call
	// forks and reaps a throwaway child to probe clone(CLONE_PIDFD)
	// (os.checkPidfd) on the first app's start path, for a pidfd the
	// reaper, which owns wait4, never uses.
	files := []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2]), pr.Fd(), rw.Fd(), uintptr(o.pause.pidns), uintptr(o.gateFor()), handover.NoFd}
	if o.cgroupNS >= 0 {
		files[appexec.CgroupNSFd] = uintptr(o.cgroupNS)
	}
	files = append(files, listen...) // from appexec.ListenFd on
	fork := func() (int, error) {
		return syscall.ForkExec("/proc/self/exe", []string{handover.RoleApp}, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: files,
			Sys:   attr,
		})
	}
	if a.Cfg.Spec.UserNS != nil {
		// The setup process gets its spec inside fork; none is left
		// to send after it.
		b := spec
		fork = func() (int, error) { return o.forkInUserNS(a, r, files, attr, pw, b) }
		spec = nil
	}
	pid, err := o.reaper.Start(a, fork)
	pr.Close()
	rw.Close()
	if err != nil {
		return fail(err, pw, rr)
	}
	o.awaitReport(a, r, rr)
	r.pending = pendingStart{pw: pw, spec: spec, closeStdio: closeStdio}
	return o.admit(a, r, pid, false)
}

// runSpec is the spec a run of a sends its set-up, from s: a copy with
// the app's /dev/log and the apps' cgroup namespace; Start adds
// StageBinds, which the spare's brief has none of.
func (o *appOS) runSpec(a *supervisor.App, s *appexec.Spec) *appexec.Spec {
	c := o.withDevLog(a, s)
	c.CgroupNS = o.cgroupNS >= 0
	return c
}

// withDevLog returns a copy of s, the spec of a run of a, with the path of
// a's /dev/log socket, made now if a has none yet (podlog.ListenSyslog).
// An app whose socket cannot be made runs without /dev/log, said once
// per run: its syslog messages are lost, as they were before pods had
// one, and nothing else of it depends on it.
func (o *appOS) withDevLog(a *supervisor.App, s *appexec.Spec) *appexec.Spec {
	c := *s
	var p string
	wd, err := os.Getwd()
	seen := filepath.Join(wd, layout.DevLogDir)
	switch early := o.earlyDevLog[a.Name]; {
	case err != nil:
	case o.logs == nil:
		// The spare's brief, before PID 1 has its forwarder: the
		// socket is bound now, for the set-up to find, and read from
		// the app's start on (what is sent before waits in it).
		var sk *podlog.SyslogSocket
		if sk, err = podlog.BindSyslog(a.Name, written(layout.DevLogDir), seen); err == nil {
			if o.earlyDevLog == nil {
				o.earlyDevLog = map[string]*podlog.SyslogSocket{}
			}
			o.earlyDevLog[a.Name] = sk
			p = sk.Path
		}
	case early != nil:
		delete(o.earlyDevLog, a.Name)
		o.logs.ServeSyslog(a.Name, early)
		p = early.Path
	default:
		// Through the directory PID 1 kept writable: its root shows
		// the stage1's rkt/ read-only (keepWritable).
		p, err = o.logs.ListenSyslog(a.Name, written(layout.DevLogDir), seen)
	}
	if err != nil {
		o.logf("app %q: /dev/log: %v", a.Name, err)
		return &c
	}
	c.DevLog = p
	return &c
}

// awaitReport reads, off the loop, the report of a's set-up process on
// rr (readReport).
func (o *appOS) awaitReport(a *supervisor.App, r *appRes, rr *os.File) {
	h := &setupReport{app: a, run: r.logRun}
	r.handover = h
	go o.readReport(h, rr)
}

// admit moves the run's first process into the app's cgroup, unless it is
// in it already, and returns its pid in the pod and on the host.
func (o *appOS) admit(a *supervisor.App, r *appRes, pid int, in bool) (supervisor.Proc, error) {
	if r.cg != nil && !in {
		if err := r.cg.Add(pid); err != nil {
			// Outside its cgroup it would have no device allow-list
			// and no limits: it dies before it reads its spec.
			o.logf("app %q: %v", a.Name, err)
			_ = unix.Kill(pid, unix.SIGKILL)
			r.pending.spec = nil
		}
	}
	// The pid is the set-up process's, until it reports the app's.
	return supervisor.Proc{Pid: pid, HostPid: hostPid(pid), HandOver: true}, nil
}

// Started sends the run's first process its spec, or the spare its go
// (with the app's stdio), now that the run is recorded.
func (o *appOS) Started(a *supervisor.App) {
	r := o.resOf(a)
	p := r.pending
	r.pending = pendingStart{}
	if p.pw == nil {
		return
	}
	if p.spec != nil && p.stdio != nil && o.holdGo {
		// The pod's first apps are still being started: the spare's
		// app runs once each of them is in its cgroup (releaseGo).
		o.heldGo = append(o.heldGo, heldGo{app: a.Name, pending: p})
		return
	}
	o.send(a.Name, p)
}

// send hands a run's first process what it waits for: the spare its go,
// any other its spec.
func (o *appOS) send(app string, p pendingStart) {
	// Our copies of the log pipes' write ends: the app holds its own.
	defer p.closeStdio()
	defer p.pw.Close()
	// A child that dies before reading gives EPIPE here; its exit is
	// reaped and recorded like any other.
	if p.spec == nil {
		return
	}
	var err error
	if p.stdio != nil {
		// The spare has its spec (takeSpare): it waits for this.
		err = sendGo(p.pw, *p.stdio, p.gate)
	} else {
		_, err = p.pw.Write(p.spec)
	}
	if err != nil {
		o.debugf("app %q: send spec: %v", app, err)
	}
}

// heldGo is a spare's go kept until the pod's first apps are all started.
type heldGo struct {
	app     string
	pending pendingStart
}

// releaseGo sends the gos held while the pod's first apps started
// (holdGo). The spare's app would otherwise run before the apps after it
// are moved into their cgroups: a move is not held by pids.max (the
// kernel checks it at fork), and a first app that forks at once (a fork
// bomb) could fill the pod's limit before the next app's process is
// moved in, over it.
func (o *appOS) releaseGo() {
	o.holdGo = false
	held := o.heldGo
	o.heldGo = nil
	for _, h := range held {
		o.send(h.app, h.pending)
	}
}

// forkInUserNS starts an app whose process lives in a user namespace
// (appexec.startInUserNS): the setup process is cloned, moved into the
// app's cgroup and given its spec; it reports the pid of the app's
// process, which it cloned as our child, and exits. It runs inside
// reaper.Start, so the setup process is registered before its exit can be
// collected; its report is PID 1's next event, not a wait (readReport):
// until it comes the app is Starting, and PID 1 goes on with every other
// app, signal and call.
func (o *appOS) forkInUserNS(a *supervisor.App, r *appRes, files []uintptr, attr *syscall.SysProcAttr, pw *os.File, spec []byte) (int, error) {
	pid, err := syscall.ForkExec("/proc/self/exe", []string{handover.RoleApp}, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   attr,
	})
	if err != nil {
		return 0, err
	}
	// In its cgroup before it reads its spec: the app's process is
	// born there.
	if r.cg != nil {
		if err := r.cg.Add(pid); err != nil {
			o.logf("app %q: %v", a.Name, err)
			_ = unix.Kill(pid, unix.SIGKILL)
			return pid, nil
		}
	}
	if _, err := pw.Write(spec); err != nil {
		o.debugf("app %q: send spec: %v", a.Name, err)
	}
	pw.Close()
	return pid, nil
}

// setupReport is the report an app's setup process owes PID 1 on
// appexec.ReportFd: the pid of the app's process, or nothing (EOF) when
// it failed.
type setupReport struct {
	app *supervisor.App
	pid int
	// run takes the app's pid as the app sees it, for the console.
	run *podlog.Run
}

// readReport reads a setup process's report, off the loop (a goroutine
// parked on the pipe, no thread), and hands it to the loop (reports). The
// pipe's EOF is certain: the setup process ends, by itself or killed at
// the supervisor's report deadline.
func (o *appOS) readReport(h *setupReport, rr *os.File) {
	defer rr.Close()
	// One line, not to the pipe's end: the app's process, cloned while
	// the set-up held the pipe, may hold it until its execve.
	line, _ := bufio.NewReaderSize(io.LimitReader(rr, 32), 32).ReadString('\n')
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err == nil && n > 0 && o.isAppProcess(h.app.Name, n) {
		h.pid = n
		// The pid the app sees as its own (its last NSpid), for the
		// console: from /proc while the process exists (a zombie
		// too), else from the reaper, which read it before it
		// collected the exit.
		inner := reaper.InnermostPid(n)
		if inner == 0 {
			inner = o.reaper.KeptNSPid(n)
		}
		h.run.SetPid(inner)
	} else if err == nil {
		o.logf("app %q: its set-up reported pid %d, which is not a process of the app: ignored", h.app.Name, n)
	}
	h.run.SetPid(0)
	o.reports <- h
}

// isAppProcess reports whether pid, reported as app's process, is one:
// our child in the app's cgroup, or our child already reaped and kept for
// its claim. The report pipe is in the app's process for an instant
// after its birth, where an app that stopped it could reach it: what it
// could write names at most another process of the same app.
func (o *appOS) isAppProcess(app string, pid int) bool {
	why := o.notAppProcess(app, pid)
	// Read while the reaper collected it (/proc shows a task being
	// reaped as state X with no parent): the reaper keeps its exit under
	// the lock Kept waits for, so asking again after any refusal settles
	// it. Without this, such a report was refused and the set-up's 0
	// stood for the run (TestThousandFastExitsNeverZero, under load).
	if why != "" && o.reaper.Kept(pid) {
		why = ""
	}
	if why != "" {
		o.logf("app %q: pid %d: %s", app, pid, why)
	}
	return why == ""
}

// SetupCPU reads the CPU time the app's set-up process has used (user
// and system, its threads' together) from its stat in PID 1's procfs.
func (o *appOS) SetupCPU(a *supervisor.App) (time.Duration, bool) {
	if a.Pid <= 0 {
		return 0, false
	}
	st, ok := procstat.Read(a.Pid)
	if !ok {
		return 0, false
	}
	return st.CPU()
}

// notAppProcess is isAppProcess's answer: "" for the app's process, else
// why not, for the log.
func (o *appOS) notAppProcess(app string, pid int) string {
	if o.reaper.Kept(pid) {
		return ""
	}
	st, ok := procstat.Read(pid)
	if !ok {
		if o.reaper.Kept(pid) {
			return ""
		}
		return "no stat, and no exit of it kept"
	}
	if ppid, ok := st.PPid(); !ok || ppid != os.Getpid() {
		return fmt.Sprintf("not PID 1's child (stat %q)", strings.Join(st, " "))
	}
	if o.pod.Cgroup == nil {
		return ""
	}
	cg, err := cgroups.Of(pid)
	if err != nil {
		if o.reaper.Kept(pid) {
			return ""
		}
		return fmt.Sprintf("cgroup: %v, and no exit of it kept", err)
	}
	// A process that has exited (a zombie) still names its cgroup,
	// deleted once an emptied one is removed.
	want := "/" + cgroups.AppsName + "/app-" + app
	for _, m := range cg {
		if strings.HasSuffix(m.Path, want) {
			return ""
		}
	}
	return fmt.Sprintf("not in the app's cgroup (%+v)", cg)
}

// Adopt takes the process a setup process reported as the app's: it is
// registered in the reaper under the app (its exit, if the reaper kept it
// already, is handed to the loop: early), and the setup process, if still
// alive, is not the app's any more (its exit is an orphan's).
func (o *appOS) Adopt(a *supervisor.App, pid int) int {
	if a.Pid > 0 {
		o.reaper.Forget(a.Pid)
	}
	if e, ok := o.reaper.Claim(pid, a); ok {
		o.early = append(o.early, e)
		return 0
	}
	return hostPid(pid)
}

func (o *appOS) ensureCgroup(a *supervisor.App, r *appRes) error {
	if r.emptied {
		// The last run's: a restart gets a fresh one (counters,
		// cgroup.kill's sequence). One the kernel still accounts an
		// exit to (EBUSY) is reused rather than waited for: appOS
		// never waits.
		if err := r.cg.TryRemove(); err == nil || !errors.Is(err, unix.EBUSY) {
			r.cg = nil
		} else if err := o.restoreRemoved(a, r.cg); err != nil {
			return err
		}
		r.emptied = false
	}
	if o.pod.Cgroup == nil || r.cg != nil {
		return nil
	}
	cg, err := o.pod.Cgroup.Child(cgroups.AppsName + "/app-" + a.Name)
	if err != nil {
		return err
	}
	r.cg = cg
	return o.limit(a, cg, false)
}

// restoreRemoved makes again, limited, the directories of cg that a
// removal which found another busy (EBUSY) took away: the run reuses the
// group, and a process moved into it must find every hierarchy's.
func (o *appOS) restoreRemoved(a *supervisor.App, cg *cgroups.Group) error {
	gone := &cgroups.Group{V1: map[string]string{}, Unified: cg.Unified}
	for k, d := range cg.V1 {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			gone.V1[k] = d
		}
	}
	if _, err := os.Stat(cg.V2); cg.V2 != "" && errors.Is(err, os.ErrNotExist) {
		gone.V2 = cg.V2
	}
	if len(gone.Dirs()) == 0 {
		return nil
	}
	for _, d := range gone.Dirs() {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	return o.limit(a, gone, true)
}

// limit puts a's device allow-list, pids.max and resource limits on cg;
// on a part of the app's group, those of its hierarchies only.
func (o *appOS) limit(a *supervisor.App, cg *cgroups.Group, part bool) error {
	has := func(ctrl string) bool { return !part || cg.V1[ctrl] != "" || cg.Unified && cg.V2 != "" }
	if !o.pod.AllDevices && (!part || cg.V1["devices"] != "" || cg.V2 != "") {
		if err := cg.SetDevices(append(cgroups.AppDevices(o.pod.Interactive), a.Cfg.Devices...)); err != nil {
			return err
		}
	}
	n := a.Cfg.Supervision.PidsMax
	if n < 0 {
		n = podplan.AppPidsMax(o.appsPidsMax())
	}
	if n > 0 && has("pids") {
		if err := cg.SetPidsMax(n); err != nil {
			return fmt.Errorf("pids.max: %w", err)
		}
	}
	// The resource isolators are in place before the app's first
	// process is moved in; run checked the controllers exist.
	l := a.Cfg.Resources
	if !has("memory") {
		l.MemoryMax = 0
	}
	if !has("cpu") {
		l.CPUMilli, l.CPUShares = 0, 0
	}
	if err := cg.SetLimits(l); err != nil {
		return fmt.Errorf("resource isolators: %w", err)
	}
	return nil
}

// hostPid maps a pid of the pod's namespace to the host's: the fdinfo of a
// pidfd shows the pid as seen by the procfs it is read through: the host's,
// kept for this (enterOwnRoot), or /proc before PID 1 leaves the host's root.
func hostPid(pid int) int {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	if pid, ok := hostPidVia(fd); ok {
		return pid
	}
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Pid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// stdio returns the descriptors the app gets as its stdin, stdout and
// stderr, per its modes (podplan.Stdio): /dev/null, ours (the caller's,
// for an interactive pod), a new log pipe, or the ends rkt attach's
// clients are served through (podattach; a stream's output is logged as
// well). close releases our copies once the app has its own.
func (o *appOS) stdio(a *supervisor.App) (fds [3]int, close func(), err error) {
	var pipes []*os.File
	var att *podattach.Run
	// slave is the console's end the app gets (openConsole), -1 until
	// it has one.
	slave := -1
	close = func() {
		for _, p := range pipes {
			p.Close()
		}
		if slave >= 0 {
			unix.Close(slave)
		}
		if att != nil {
			att.Started()
		}
	}
	// The console's lines of this run show its process's pid, which
	// its set-up reports (readReport).
	o.resOf(a).logRun = o.logs.BeginRun(a.Name)
	if att, err = o.attach.Begin(a.Name, a.Cfg.Stdio); err != nil {
		return fds, nil, err
	}
	if att != nil && att.Master >= 0 {
		// The terminal's output is the app's stdout.
		o.logs.Carry(a.Name, podlog.Stdout, a.Cfg.Stdio.CRIPath, att.Master, att.TTYTee)
	}
	modes := [3]string{a.Cfg.Stdio.Stdin, a.Cfg.Stdio.Stdout, a.Cfg.Stdio.Stderr}
	// An app's stdout and stderr that go to one console file (rkt run's
	// terminal, "2>&1") are one pipe, so that the console shows them in
	// the order the app wrote them, as it would holding the terminal
	// itself; rkt's stage1 gives them one journal stream too. Two pipes
	// reorder them: rkt's TestNetCustomBridge waits for the last line the
	// app writes to stdout and timed out when the app's next line, on
	// stderr, reached the terminal first. The logs then tag both streams
	// stdout. CRI files keep the streams apart: their format tags them.
	merged := modes[1] == podplan.StdioLog && modes[2] == podplan.StdioLog &&
		a.Cfg.Stdio.CRIPath == "" && o.logs.ConsoleIsOne()
	for i, m := range modes {
		switch {
		case merged && i == podlog.Stderr:
			fds[i] = fds[podlog.Stdout]
		case m == podplan.StdioInteractive && o.pod.Console:
			if slave < 0 {
				if slave, err = o.openConsole(); err != nil {
					close()
					return fds, nil, err
				}
			}
			fds[i] = slave
		case m == podplan.StdioInteractive:
			fds[i] = i
		case m == podplan.StdioTTY || m == podplan.StdioStream && i == 0:
			fds[i] = att.Fds[i]
		case m == podplan.StdioLog || m == podplan.StdioStream:
			var tee podlog.Tee
			if att != nil && att.Tees[i] != nil {
				tee = att.Tees[i]
			}
			w, err := o.logs.PipeTee(a.Name, i, a.Cfg.Stdio.CRIPath, tee)
			if err != nil {
				close()
				return fds, nil, err
			}
			pipes = append(pipes, w)
			fds[i] = int(w.Fd())
		default:
			// null, and the zero value of a configuration from
			// before stdio modes.
			fds[i] = o.devNull
		}
	}
	if err := giveStdio(phaseSpec(a), modes, fds); err != nil {
		close()
		return fds, nil, err
	}
	return fds, close, nil
}

// giveStdio makes the app's user the owner of the stdio ends PID 1 made
// for it (log pipes, a stream's stdin pipe, its terminal), so that the app
// can open them again by path (/dev/stdout, /proc/self/fd/1: nginx's log
// files link there), which the kernel checks against the inode's owner
// and mode: a pipe is its creator's, host root's, mode 0600. In a user
// namespace host root is no uid at all, and even the namespace's root
// gets EACCES; without one an app that is not root gets it too. runc
// gives its containers' stdio to their user for the same reason.
//
// Who else can then open them: a pipe or PID 1's terminal has no path,
// only /proc/<pid>/fd/<n> of a process holding it, which the kernel opens
// for those who pass the ptrace check on that process: the app's own
// processes (and PID 1, the host's root). Another app's processes in a
// user namespace of their own fail it, whatever their uid; without user
// namespaces an app of the same uid can ptrace this one anyway. The
// caller's descriptors (interactive) and /dev/null are never changed.
func giveStdio(s *appexec.Spec, modes [3]string, fds [3]int) error {
	uid, gid := s.UID, s.GID
	if s.UserNS != nil {
		var err1, err2 error
		uid, err1 = s.UserNS.ToHost(uid)
		gid, err2 = s.UserNS.ToHost(gid)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
	}
	for i, m := range modes {
		switch m {
		case podplan.StdioLog, podplan.StdioStream, podplan.StdioTTY:
		default:
			continue
		}
		if err := unix.Fchown(fds[i], uid, gid); err != nil {
			return fmt.Errorf("give fd %d to the app's user: %w", i, err)
		}
	}
	return nil
}

// appsPidsMax is the pod's pids.max, on its apps' cgroup (0 for none).
// The annotation's is in the configuration; the host's default run puts
// there before handover.HostReady, off its start path, and it is read
// from there once, after HostReady (hostIsReady sets again what the
// spare's app's cgroup got before).
func (o *appOS) appsPidsMax() int {
	if o.pod.PidsMax >= 0 {
		return o.pod.PidsMax
	}
	if o.podPidsMax == nil {
		n := o.pod.Cgroup.Sub(cgroups.AppsName).PidsMax()
		if !o.hostReady {
			return n
		}
		o.podPidsMax = &n
	}
	return *o.podPidsMax
}

// hostIsReady is told that run has finished preparing the host, the
// pod's pids.max included: the cgroups made before (the spare's app's,
// admitSpare) get the per-app default worked out from it.
func (o *appOS) hostIsReady() {
	o.hostReady = true
	if o.pod.PidsMax >= 0 {
		return
	}
	for a, r := range o.res {
		if r.cg == nil || a.Cfg.Supervision.PidsMax >= 0 {
			continue
		}
		if err := r.cg.SetPidsMax(podplan.AppPidsMax(o.appsPidsMax())); err != nil {
			o.logf("app %q: pids.max: %v", a.Name, err)
		}
	}
}
