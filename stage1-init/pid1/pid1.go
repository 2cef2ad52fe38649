package pid1

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podattach"
	"github.com/pod1/pod1/podenv"
	"github.com/pod1/pod1/podlog"
	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/sigpolicy"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/starttricks"
	"github.com/pod1/pod1/status"
	"github.com/pod1/pod1/supervisor"
)

// initMain is the pod's PID 1. Before the first app starts, any error ends
// the pod with 254; after that PID 1 never dies on an error: it logs, stops
// the apps in order and exits with the pod's code (catatonit's rule).
func initMain() int {
	// The signal table first: until it is in, the Go runtime's defaults
	// would make a SIGTERM exit 2 and drop a SIGUSR1 (threats T20).
	// Exits need no registration: the loop's first wake-up
	// (reaper.Wakeup) reaps whatever exited before, as a zombie waiting
	// for us, so none can be missed (dumb-init #104).
	req := sigpolicy.Listen()
	if err := starttricks.UseArgs(os.Args[1:]); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	if err := takeHandover(req); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	rp := reaper.New()
	code := runPodInit(req, rp)
	killAndReapAll(rp)
	return code
}

// killAndReapAll makes sure nothing of the pod outlives PID 1, whatever
// path ends it: the lock (held for PID 1 by the lock keeper) is released
// only when it exits, and when that happens nothing else may be left.
func killAndReapAll(rp *reaper.Reaper) {
	_ = unix.Kill(-1, unix.SIGKILL)
	rp.WaitAll()
}

// runPodInit sets the pod up, starts the apps and supervises them until the
// pod is over, and returns the pod's exit code.
func runPodInit(req *sigpolicy.Requests, rp *reaper.Reaper) int {
	// Nothing in the pod may ptrace PID 1 or read its /proc/1/root,
	// /proc/1/fd, /proc/1/environ (CVE-2016-9962, threats T2, T4).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("pod init: prctl dumpable: %w", err))
	}
	// Before the first fork: the spare and every later child would
	// otherwise exec with run's whole permitted set.
	if err := clearInheritable(); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	// The init of the apps' pid namespace, which the spare needs.
	pz, err := startPause(rp)
	if err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	// Before the configuration: its Go start-up then overlaps run's
	// preparation.
	sp := startSpare(rp)
	// The apps' usual device allow-list as a BPF program, loaded while
	// run still prepares the pod: the kernel's verifier then runs off
	// the first app's start path (SetDevices finds it loaded).
	cgroups.PreloadDeviceFilter(cgroups.AppDevices(false))
	pod, hostDone, err := readPodConfig(os.NewFile(handover.ConfigFd, "pod-config"))
	if err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	if err := podenv.Setup(pod.Hostname, pod.NewNet, pod.PrivateUsers); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	procfs, err := pz.procfs()
	if err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	cgroupNS, err := appsCgroupNS(pod, pz, rp)
	if err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	shm, err := makePodShm(pod.ShmSize)
	if err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	o := &appOS{pod: pod, reaper: rp, spare: sp, pause: pz, reports: make(chan *setupReport), commit: commitPipe(), gate: -1, gateW: -1, cgroupNS: cgroupNS}
	p := &pid1{pod: pod, os: o, reaper: rp, req: req, sup: supervisor.New(o, pod)}
	if apps := p.sup.Apps(); len(apps) > 0 {
		// The spare sets the first app's root up while PID 1 sets
		// up its own; it runs nothing of the app before its go,
		// which comes after (Started).
		o.admitSpare(apps[0])
		o.briefSpare(apps[0], procfs[0], shm[0])
	}
	unix.Close(procfs[0])
	unix.Close(shm[0])
	var ctl *net.UnixListener
	if pod.Mutable {
		// In PID 1's own root the socket's directory is read-only.
		if ctl, err = control.Listen(); err != nil {
			return fail(fmt.Errorf("pod init: %w", err))
		}
	}
	if err := enterOwnRoot(pod, procfs[1], shm[1]); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	if err := pz.giveRoot(pod.Cgroup, cgroupNS >= 0, pod.AppsBoundingSet()); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	// From here on PID 1 writes its cgroups through the descriptors it
	// kept: its root shows them read-only.
	pod.Cgroup = writableCgroup(pod.Cgroup)
	for _, r := range o.res {
		r.cg = writableCgroup(r.cg)
	}
	if o.dir, err = status.OpenDir(written(layout.StatusDir)); err != nil {
		return fail(fmt.Errorf("pod init: status directory: %w", err))
	}
	if o.devNull, err = unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	o.logs = newForwarder(pod)
	peers := control.NewPeers(pod.HostPidNS)
	o.attach = podattach.New(written(layout.AttachDir), peers.Authenticate, o.logf)
	o.logs.OnJournalError(func(err error) {
		o.logf("journal: %v (lines it refuses are counted in the apps' records as logDropped)", err)
	})
	defer p.recoverPanic()
	if pod.Mutable {
		// App operations come over the control socket; it is up
		// before the pod says it is ready for them.
		p.calls = make(chan *control.Call)
		defer control.Serve(ctl, p.calls, peers, o.logf)()
	}
	// Nothing starts before run has placed PID 1 in its cgroups.
	if err := hostDone(); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	// No app before pod1-pause holds nothing.
	if err := pz.awaitRoot(); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	// pod1-pause was born before: it joins PID 1's cgroups, the pod's,
	// where whatever is left of the pod is killed with them.
	if cg := pod.Cgroup; cg != nil {
		if err := cg.Sub(handover.Stage1Cgroup).Add(pz.pid); err != nil {
			return fail(fmt.Errorf("pod init: %s: %w", handover.RolePause, err))
		}
	}
	// The gate matters only among several apps: one app's process goes
	// at once.
	if len(p.sup.Apps()) > 1 {
		var gate [2]int
		if err := unix.Pipe2(gate[:], unix.O_CLOEXEC); err != nil {
			return fail(fmt.Errorf("pod init: gate: %w", err))
		}
		o.gate, o.gateW = gate[0], gate[1]
	}
	o.hostIsReady()
	// A stop asked while the apps start is acted on before the next one
	// starts, not after all of them.
	o.holdGo = true
	p.sup.StartAll(func() bool { p.actOnRequest(); return p.sup.Stopping() })
	o.releaseGo()
	if o.dropSpare() {
		// Ready once the spare is reaped (handle), or given up on.
		p.readyBy = time.Now().Add(spareTimeout)
	} else {
		p.ready()
	}
	return p.loop()
}

// spareTimeout bounds the wait for the spare's end before the pod says it
// is ready.
const spareTimeout = 5 * time.Second

// pid1 is the pod's PID 1 once its apps start: an event loop feeding the
// supervisor (package supervisor, which decides) with the reaper's exits,
// the stop requests, the app operations and the clock.
type pid1 struct {
	pod    *podplan.Pod
	sup    *supervisor.Supervisor
	os     *appOS
	reaper *reaper.Reaper
	// req is the stop asked of PID 1 (signals, the death of run).
	req *sigpolicy.Requests
	// calls are app operations (mutable pods only; nil otherwise).
	calls chan *control.Call
	// readyBy, when not zero, is when the pod says it is ready even if
	// the spare it killed is not yet reaped.
	readyBy time.Time
	// readyWhenStarted: the pod says it is ready once no app is
	// starting (ready).
	readyWhenStarted bool
	// shedAt, when not zero, is when the loop sheds the memory only
	// start-up used (shedUnusedMemory).
	shedAt time.Time
	// shed: the binary's pages were shed since the last restoreCode.
	shed bool
}

// ready marks the pod ready (contract §4), once every app it started
// runs: until its set-up process reports the app's process, a stop would
// find the app not yet told to run (supervisor: Starting), where rkt's
// pods say they are ready with their apps running.
func (p *pid1) ready() {
	p.readyBy = time.Time{}
	if p.sup.Starting() {
		p.readyWhenStarted = true
		return
	}
	p.readyWhenStarted = false
	if err := markReady(); err != nil {
		p.os.logf("supervisor-status: %v", err)
	}
	p.shedAt = time.Now().Add(shedDelay)
}

// actOnRequest carries out the stop asked so far, if any: repeating one is
// harmless (a stop only escalates), so it is called whenever asked may have
// changed.
func (p *pid1) actOnRequest() {
	if p.req == nil {
		return
	}
	switch p.req.Level() {
	case sigpolicy.Stop:
		p.sup.StopPod(p.req.Why(), false)
	case sigpolicy.ForceStop:
		p.sup.StopPod(p.req.Why()+": forced stop", true)
	default:
		return
	}
	// The apps have their signals: the code of the pod's end is mapped
	// back in while they exit.
	if p.shed {
		p.shed = false
		restoreCode()
	}
}

// shedMemory is shedUnusedMemory, remembered for restoreCode. The
// threads the runtime started before PID 1 named itself (nameProcess) are
// named now too, off the start path: each showed as "256" in top -H and
// ps -L, and a thread the runtime starts later takes its creator's name.
func (p *pid1) shedMemory() {
	nameThreads(handover.RoleInit)
	shedUnusedMemory()
	p.shed = true
}

// nameThreads names every thread of the process name. A thread takes its
// creator's name when it is created, so one the runtime starts during a
// pass, from a thread not yet named, is missed by that pass's listing and
// would keep the old name for good: passes repeat until one finds every
// thread named (a few at most; the bound only guards against a runtime
// that starts threads without end).
func nameThreads(name string) {
	for range 8 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		renamed := false
		for _, t := range tasks {
			comm := "/proc/self/task/" + t.Name() + "/comm"
			if b, err := os.ReadFile(comm); err == nil && strings.TrimSuffix(string(b), "\n") == name {
				continue
			}
			_ = os.WriteFile(comm, []byte(name), 0)
			renamed = true
		}
		if !renamed {
			return
		}
	}
}

// readPodConfig reads the pod's configuration from f (handover.ConfigFd), and
// returns it and hostDone, which waits for the rest of f: handover.HostReady, then
// its end (run's last steps on the host, which PID 1's own set-up
// overlaps), and closes f.
func readPodConfig(f *os.File) (pod *podplan.Pod, hostDone func() error, err error) {
	r := io.LimitReader(f, 4*layout.MaxFileSize+int64(len(handover.HostReady)))
	dec := json.NewDecoder(r)
	var p podplan.Pod
	if err := dec.Decode(&p); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("decode pod configuration: %w", err)
	}
	hostDone = func() error {
		defer f.Close()
		rest, err := io.ReadAll(io.MultiReader(dec.Buffered(), r))
		if err != nil {
			return fmt.Errorf("read pod configuration: %w", err)
		}
		if string(rest) != handover.HostReady {
			return errors.New("pod configuration: run did not finish preparing the host (it failed or was killed)")
		}
		return nil
	}
	return &p, hostDone, nil
}

// markReady writes rkt/supervisor-status -> "ready" (contract §4), a
// symlink replaced atomically.
func markReady() error {
	d, err := safefile.OpenDir(written(layout.RktDir))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Symlink(filepath.Base(layout.SupervisorStatus), "ready")
}

// recoverPanic turns a panic in the supervisor into the same orderly end as
// any other failure after the apps started: every pod process killed and
// reaped, the statuses that are known written, exit 254 (threats FI-14).
func (p *pid1) recoverPanic() {
	r := recover()
	if r == nil {
		return
	}
	logx.Errorf("pod init panic: %v", r)
	_, _ = logx.Writer().Write(debug.Stack())
	_ = unix.Kill(-1, unix.SIGKILL)
	for _, e := range p.reaper.WaitAll() {
		a, ok := e.Tag.(*supervisor.App)
		if ok && !a.Finished() {
			_ = p.os.dir.Write(a.Name, status.FromWaitStatus(e.Status))
		}
	}
	os.Exit(status.CodeStage1Failure)
}

// loop runs until the pod is over: every app finished (and, for a mutable
// pod, a stop requested). It never blocks but in its select: everything
// that takes time (a grace period, a restart's backoff, a cgroup being
// emptied, a user namespace's hand-over, the spare's end) is an event with
// a deadline of the supervisor's or of the loop's. Then nothing may remain: leftovers are killed and reaped, and
// the cgroups removed, before PID 1 exits and the lock can be released.
func (p *pid1) loop() int {
	// Woken at each exit (SIGCHLD, reaper.Wakeup), and by a periodic
	// sweep as well: cheap insurance against a lost wake-up (containerd
	// #12678).
	wakeup := p.reaper.Wakeup()
	sweep := time.NewTicker(time.Second)
	defer sweep.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var exits []reaper.Exit
	for {
		p.handle(exits)
		exits = nil
		// Reports that came before the clock is read are taken before
		// it: a slow start of many apps (the loop does not run while
		// they start) would otherwise find every set-up late, its
		// report waiting here (supervisor.ReportTimeout).
		p.takeReports()
		next := p.sup.Tick()
		if !p.sup.Starting() {
			// Every app of the pod's start has its process.
			p.os.openGate()
			if p.readyWhenStarted {
				p.ready()
			}
		}
		if !p.readyBy.IsZero() {
			if !time.Now().Before(p.readyBy) {
				p.ready()
			} else if next.IsZero() || p.readyBy.Before(next) {
				next = p.readyBy
			}
		}
		if p.sup.Over() {
			break
		}
		if !p.shedAt.IsZero() {
			// In the loop itself, not in a timer's goroutine: see
			// shedUnusedMemory.
			if !time.Now().Before(p.shedAt) {
				p.shedAt = time.Time{}
				p.shedMemory()
			} else if next.IsZero() || p.shedAt.Before(next) {
				next = p.shedAt
			}
		}
		timer.Reset(time.Until(next))
		if next.IsZero() {
			timer.Stop()
		}
		select {
		case <-wakeup:
			exits = p.reaper.Reap()
		case <-p.req.C:
			p.actOnRequest()
		case c := <-p.calls:
			p.handleCall(c)
			// App operations are rare and leave garbage (manifests
			// parsed, specs decoded) and map in code the loop does not
			// use: give both back now so PID 1 stays small in a
			// long-lived pod.
			p.shedMemory()
		case h := <-p.os.reports:
			p.report(h)
		case <-timer.C:
		case <-sweep.C:
			exits = p.reaper.Reap()
		}
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	p.handle(p.reaper.WaitAll())
	// Nothing of the pod is left to empty a cgroup: an app still being
	// cleaned is finished now.
	p.sup.Flush()
	// The apps' cgroups, emptied, stay for gc with the pod's: removing
	// them here (an rmdir in every hierarchy, and a wait for a cgroup
	// the kernel still accounts an exit to) came before PID 1's exit,
	// on the way to the lock's release.
	// Every writer is gone: the pipes hold the apps' last lines, which
	// are carried before the lock is released. The records then get the
	// final count of lines the sinks, and bytes the console, could not
	// take.
	p.os.logs.Close(logDrainTimeout)
	p.os.endConsole(true)
	p.os.attach.Close()
	for _, a := range p.sup.Apps() {
		if a.Rec.LogDropped != p.os.logs.Dropped(a.Name) || a.Rec.ConsoleDropped != p.os.logs.ConsoleDropped(a.Name) ||
			a.Rec.SyslogDropped != p.os.logs.SyslogDropped(a.Name) {
			p.os.WriteRecord(a)
		}
	}
	return p.sup.Code()
}

// logDrainTimeout bounds the wait for the last lines at the pod's end: a
// console nobody reads or a slow journal must not keep the pod (and its
// lock) alive for long; a journal that takes nothing is given up on sooner
// (podlog).
const logDrainTimeout = 5 * time.Second

func newForwarder(pod *podplan.Pod) *podlog.Forwarder {
	dir, cri := -1, -1
	if pod.Logs.Files {
		dir = handover.LogDirFd
	}
	if pod.CRIDir != "" {
		cri = handover.CRIDirFd
	}
	var f *podlog.Forwarder
	if pod.Logs.PodJournal {
		var err error
		f, err = podlog.NewWithPodJournal(pod.UUID, pod.Logs.Journal, dir, cri, podlog.PodJournal{
			Dir: handover.JournalDirFd, Machine: layout.MachineID(pod.UUID), Boot: pod.Logs.BootID, Hostname: pod.Hostname,
		})
		if err != nil {
			logx.Warnf("%v; the pod has no journal of its own", err)
		}
	} else {
		f = podlog.New(pod.UUID, pod.Logs.Journal, dir, cri)
	}
	f.SetCRIFormat(pod.CRIFormat == podplan.CRIFormatKubelet)
	f.SetConsolePrefixed(!pod.ConsoleRaw)
	return f
}

// report hands a setup process's report to the supervisor, unless it is
// of a run since replaced (or of an app removed since): the process it
// reports was in that run's cgroup, emptied with it.
func (p *pid1) report(h *setupReport) {
	defer p.reaper.Unexpect()
	r := p.os.res[h.app]
	if r == nil || r.handover != h {
		return
	}
	r.handover = nil
	p.sup.Report(h.app, h.pid)
	early := p.os.early
	p.os.early = nil
	p.handle(early)
}

// takeReports handles every set-up report that is waiting, without
// waiting for one.
func (p *pid1) takeReports() {
	for {
		select {
		case h := <-p.os.reports:
			p.report(h)
		default:
			return
		}
	}
}

// handle hands the exits of the apps' processes to the supervisor; the
// spare's end makes the pod ready.
func (p *pid1) handle(exits []reaper.Exit) {
	for _, e := range exits {
		switch t := e.Tag.(type) {
		case *supervisor.App:
			p.sup.Exit(t, e.Status, e.Time)
		case spareTag:
			if !p.readyBy.IsZero() {
				p.ready()
			}
		case pauseTag:
			// The kernel has killed every process of the apps' pid
			// namespace with it, and no app can start there again.
			if !p.sup.Stopping() && !p.sup.Over() {
				p.os.logf("%s ended (%s): the apps' pid namespace is gone; stopping the pod", handover.RolePause, waitStatusString(e.Status))
				p.sup.StopPod(handover.RolePause+" ended", true)
			}
		}
	}
}

// waitStatusString says how a process ended.
func waitStatusString(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}
