// Package supervisor owns the life of a pod's apps in PID 1: which state
// each app is in, and what every event does to it. The whole of it is one
// table of state x event (table.go); this file holds the types, the pod's
// side (its stop, its end, its exit code) and the helpers the table's
// actions share.
//
// The supervisor never touches the system itself: processes, signals,
// cgroups, status files and the clock are reached through OS, which
// stage1-init implements for real and the tests with fakes. It is not safe
// for concurrent use: PID 1's event loop is its only caller.
package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/status"
)

// OS is what the supervisor needs of the system. Every method returns at
// once: none may wait for a process or a cgroup.
type OS interface {
	// Now is the clock every deadline is measured with.
	Now() time.Time
	// Start starts a run of the app: its first process exists, in the
	// app's cgroup, but does nothing yet. It returns the process: its
	// pid in the pod and on the host, and whether it is a set-up process
	// that reports the app's process later (Reported).
	Start(a *App) (Proc, error)
	// Adopt takes pid, reported by the run's set-up process (a.Pid
	// while that is alive, else 0), as the app's process, and returns
	// its host pid. Its end comes as Exit, also if it came already.
	Adopt(a *App, pid int) (hostPid int)
	// Started lets the process of a run Start began go on (sends it its
	// spec), once the run is recorded.
	Started(a *App)
	// SetupCPU is the CPU time the run's set-up process (a.Pid, Starting)
	// has used so far; false when it cannot be told.
	SetupCPU(a *App) (time.Duration, bool)
	// Signal sends sig to the app's first process and everything in its
	// cgroup; Kill sends SIGKILL to them.
	Signal(a *App, sig unix.Signal)
	Kill(a *App)
	// Sweep kills what the app's last run left in its cgroup and reports
	// whether nothing is left (the emptied cgroup is removed after the
	// status, unless the pod is ending: gc removes it then);
	// Release then reports whether the kernel's OOM killer killed in it.
	Sweep(a *App) (empty bool)
	Release(a *App) (oomKilled bool)
	// WriteRecord writes the app's JSON record (a.Rec); WriteStatus the
	// plain status file rkt reads; ClearStatus removes the latter.
	// last says that the pod ends with this status and nobody waits for
	// it: its commit may be left to the pod's end (status.WritePending),
	// which makes it durable and visible before the lock is released.
	WriteRecord(a *App)
	WriteStatus(name string, code int, last bool)
	ClearStatus(name string)
	// Forget deletes what PID 1 keeps of a removed app: its record, its
	// spec, its cgroup.
	Forget(a *App)
	// Logf logs a line at a level; Debugf one only --debug shows.
	Logf(level Level, format string, args ...any)
	Debugf(format string, args ...any)
}

// Level is how much a line the supervisor logs matters.
type Level int

// The levels of the supervisor's lines (debug lines go to Debugf).
const (
	// Info: the supervision doing its job (a grace period over).
	Info Level = iota
	// Warning: an app's run failed for a reason of its own making or of
	// the system's (a start that failed, a handler, the start limit, a
	// cgroup that will not empty, a set-up that does not report).
	Warning
	// Bug: an event that cannot happen in the state its app is in.
	Bug
)

// State is where an app is in its life.
type State int

// The states; the zero value is Removed, an app not in the pod.
const (
	Removed  State = iota // not in the pod (not yet added, or removed)
	Idle                  // in the pod, never started (a mutable pod's added app)
	Starting              // its set-up process prepares it in a user namespace; the app's process is not known yet
	Running               // its process exists
	Stopping              // its process exists and had SIGTERM; SIGKILL at its kill deadline
	Killing               // its process exists and had SIGKILL
	Cleaning              // its process ended; what it left in its cgroup is being killed
	Backoff               // waiting out its restart delay
	Exited                // finished for good: its status is written
	numStates
)

var stateNames = [numStates]string{"removed", "idle", "starting", "running", "stopping", "killing", "cleaning", "backoff", "exited"}

func (s State) String() string {
	if s >= 0 && s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Event is something that happens to an app.
type Event int

// The events.
const (
	Add            Event = iota // app/add: the app enters the pod
	Start                       // the pod's start, or app/start
	Reported                    // the set-up process reported the app's process (Input.Pid), or that there is none (0)
	ReportDeadline              // the set-up process did not report in time
	Exit                        // its first process ended (the reaper saw it)
	CgroupEmpty                 // nothing of its last run is left in its cgroup
	CleanDeadline               // its cgroup did not empty in time
	RestartTimer                // its restart delay is over
	Stop                        // app/stop
	ForceStop                   // app/stop --force
	KillDeadline                // the grace period of its stop is over
	Rm                          // app/rm
	PodStop                     // the pod stops (a signal, the exit policy)
	PodForceStop                // the pod stops at once (a second signal, SIGKILL's turn)
	numEvents
)

var eventNames = [numEvents]string{"add", "start", "reported", "report-deadline", "exit", "cgroup-empty", "clean-deadline", "restart-timer",
	"stop", "force-stop", "kill-deadline", "rm", "pod-stop", "pod-force-stop"}

func (e Event) String() string {
	if e >= 0 && e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", int(e))
}

// Timings of the Cleaning state.
const (
	// CleanTimeout bounds how long an app's cgroup may take to empty
	// after its process ended (threats P8): a process the kernel cannot
	// kill (stuck in a hung file system) must not hold its app forever.
	CleanTimeout = 5 * time.Second
	// firstRecheck is how soon a cgroup that did not empty at once is
	// looked at again; each look doubles it, up to maxRecheck. Exits of
	// the killed processes (they are PID 1's, by re-parenting) wake the
	// loop sooner.
	firstRecheck = 200 * time.Microsecond
	maxRecheck   = 50 * time.Millisecond
)

// ReportTimeout bounds the Starting state: how long an app's set-up
// process may go without reporting the app's process and without using
// the CPU (a mount on a hung file system could block it). One that used
// the CPU since the last look is busy, not stuck (a pod that starts
// hundreds of apps on a slow machine): it gets another ReportTimeout, up
// to ReportLimit from its start. PID 1 goes on meanwhile.
const (
	ReportTimeout = 30 * time.Second
	ReportLimit   = 5 * time.Minute
)

// Proc is the first process of a run, as Start returns it.
type Proc struct {
	Pid, HostPid int
	// HandOver: it is a set-up process, which reports the app's own
	// process (Reported) and then exits; until then the app is Starting.
	HandOver bool
}

// ErrNotRunning answers a stop of an app that is not running: done, as
// systemctl stop of an inactive unit is.
var ErrNotRunning = errors.New("not running")

// fate is what the end of the app's current run leads to.
type fate int

const (
	fateRestart fate = iota // its restart policy decides
	fateStop                // finished: it was asked to stop
	fateRemove              // finished, then removed from the pod
)

// App is the supervisor's record of one app.
type App struct {
	Name string
	Cfg  *podplan.App
	// Pid is its first process in the pod (0 when it has none).
	Pid int
	// Rec is its JSON record; Rec.State is derived from the state when
	// it is written.
	Rec status.Record

	state State
	fate  fate
	// phase is which process of the run runs (handlers.go).
	phase Phase
	// deadline is the timer of the state: the restart of Backoff, the
	// SIGKILL of Stopping, the give-up of Cleaning.
	deadline time.Time
	// recheck and recheckAt pace the looks at a Cleaning app's cgroup.
	recheck   time.Duration
	recheckAt time.Time
	// starts are the recent start times, for the start limit.
	starts  []time.Time
	backoff time.Duration
	// code and ended are the last run's exit code and end time.
	code  int
	ended time.Time
	// setupEnded: the run's set-up process (Starting) ended before its
	// report was read; setupStatus and setupTime are its end, the run's
	// if it reports nothing.
	setupEnded  bool
	setupStatus unix.WaitStatus
	setupTime   time.Time
	// awaiting: a report of the current run's set-up process is to come.
	awaiting bool
	// setupCPU is the CPU time the set-up had used at the last look at
	// it; setupLimit is when it is killed however busy (ReportLimit).
	setupCPU   time.Duration
	setupLimit time.Time
	// stopAsked: the pod's stop came while the run was starting; its
	// deadline is then the grace period's.
	stopAsked bool
	// podStopped: the run was under way when the pod's stop began.
	podStopped bool
	// waiters are answered when the app is finished (app/stop, app/rm);
	// started when it leaves Starting (app/start).
	waiters []func(error)
	started []func()
}

// State is the app's state.
func (a *App) State() State { return a.state }

// Finished reports whether the app is finished for good.
func (a *App) Finished() bool { return a.state == Exited || a.state == Removed }

// Active reports whether the app is in a run: started and not finished.
func (a *App) Active() bool { return a.state != Idle && !a.Finished() }

// recordState is the state its JSON record shows.
func (a *App) recordState() string {
	if a.fate == fateRemove {
		return status.StateRemoving
	}
	switch a.state {
	case Idle:
		return status.StateAdded
	case Starting, Running, Stopping, Killing, Cleaning:
		return status.StateRunning
	case Backoff:
		return status.StateRestarting
	case Exited:
		return status.StateExited
	}
	return status.StateRemoving
}

// Input is what an event carries.
type Input struct {
	// Exit: the wait status and time of the end.
	Status unix.WaitStatus
	Time   time.Time
	// Reported: the app's process in the pod, 0 if none was reported.
	Pid int
	// Stop, ForceStop, Rm: called with the answer once the app is
	// finished (or at once); may be nil.
	Reply func(error)
	// Add: saves what the app needs before it enters the pod; may be
	// nil.
	Save func() error
	// Start: asked by app/start (a new life), not by the pod's start.
	Op bool
	// Err is set by an event that is refused (app operations) or cannot
	// happen.
	Err error
}

// Supervisor runs the apps of one pod. By default it has rkt's semantics:
// the pod ends when every app has finished; the first app to finish with a
// failure stops the others and its code becomes the pod's. Restart
// policies and the pod's exit policy refine that (docs/supervision.md).
type Supervisor struct {
	os         OS
	mutable    bool
	exitPolicy string
	mainApp    string
	apps       []*App
	stopping   bool
	podCode    int
	// failStop: the pod is stopping because an app failed (rkt's
	// default exit policy).
	failStop bool
	// final: the pod is over (Flush); no handler starts any more.
	final bool
}

// New returns the supervisor of pod's apps, each Idle.
func New(sys OS, pod *podplan.Pod) *Supervisor {
	s := &Supervisor{os: sys, mutable: pod.Mutable, exitPolicy: pod.ExitPolicy, mainApp: pod.MainApp}
	for i := range pod.Apps {
		s.apps = append(s.apps, newApp(&pod.Apps[i]))
	}
	for _, a := range s.apps {
		a.state = Idle
	}
	return s
}

func newApp(cfg *podplan.App) *App {
	return &App{Name: cfg.Spec.Name, Cfg: cfg, backoff: cfg.Supervision.Backoff}
}

// Apps returns the apps in the pod, in start order.
func (s *Supervisor) Apps() []*App { return slices.Clone(s.apps) }

// Find returns the app named name, or nil.
func (s *Supervisor) Find(name string) *App {
	for _, a := range s.apps {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Stopping reports whether the pod is stopping.
func (s *Supervisor) Stopping() bool { return s.stopping }

// Starting reports whether an app's set-up process has yet to report the
// app's process (the pod is not ready before).
func (s *Supervisor) Starting() bool {
	for _, a := range s.apps {
		if a.state == Starting {
			return true
		}
	}
	return false
}

// Code is the pod's exit code.
func (s *Supervisor) Code() int { return s.podCode }

// Over reports whether the pod is over: every app finished (or never
// started) and, for a mutable pod, a stop asked.
func (s *Supervisor) Over() bool {
	for _, a := range s.apps {
		if a.Active() {
			return false
		}
	}
	return !s.mutable || s.stopping
}

// Fire applies event e to app a, per the table.
func (s *Supervisor) Fire(a *App, e Event, in *Input) {
	if in == nil {
		in = &Input{}
	}
	c := table[a.state][e]
	if c.impossible {
		in.Err = fmt.Errorf("app %q: %v while %v: %w", a.Name, e, a.state, errImpossible)
		s.os.Logf(Bug, "%v", in.Err)
	}
	was := a.state
	c.do(s, a, in)
	if was == Starting && a.state != Starting && len(a.started) > 0 {
		fs := a.started
		a.started = nil
		for _, f := range fs {
			f()
		}
	}
}

// WhenStarted calls f once the app named name has left Starting (its
// process known, or its set-up over), and reports whether it will: false
// when the app is not Starting, and f is not called. app/start is
// answered so, as it was when PID 1 waited for the hand-over.
func (s *Supervisor) WhenStarted(name string, f func()) bool {
	a := s.Find(name)
	if a == nil || a.state != Starting {
		return false
	}
	a.started = append(a.started, f)
	return true
}

var errImpossible = errors.New("impossible")

// StartAll starts the pod's apps in order; stopped reports, before each,
// whether the pod was asked to stop meanwhile (acted on first).
func (s *Supervisor) StartAll(stopped func() bool) {
	for _, a := range slices.Clone(s.apps) {
		stopped()
		s.Fire(a, Start, nil)
	}
}

// Exit hands the end of an app's first process to the supervisor.
func (s *Supervisor) Exit(a *App, ws unix.WaitStatus, t time.Time) {
	s.Fire(a, Exit, &Input{Status: ws, Time: t})
}

// Report hands the report of an app's set-up process to the supervisor:
// the app's process in the pod, or 0 when it reported none.
func (s *Supervisor) Report(a *App, pid int) {
	s.Fire(a, Reported, &Input{Pid: pid})
}

// StopPod asks every app to end, in reverse start order: SIGTERM to
// everything in its cgroup, and SIGKILL when its grace period is over (at
// once when forced). Apps waiting to restart are finished with their last
// code. Repeating it is harmless: a stop only escalates.
func (s *Supervisor) StopPod(why string, force bool) {
	if !s.stopping {
		s.os.Debugf("stopping the pod: %s", why)
		for _, a := range s.apps {
			a.podStopped = a.Active() && a.state != Backoff
		}
	}
	s.stopping = true
	e := PodStop
	if force {
		e = PodForceStop
	}
	apps := slices.Clone(s.apps)
	for i := len(apps) - 1; i >= 0; i-- {
		s.Fire(apps[i], e, nil)
	}
}

// AddApp adds an app to a mutable pod; save, if not nil, saves what the
// app needs (its spec) once its name is known to be free.
func (s *Supervisor) AddApp(cfg *podplan.App, save func() error) error {
	a := s.Find(cfg.Spec.Name)
	if a == nil {
		a = newApp(cfg)
	}
	in := &Input{Save: save}
	s.Fire(a, Add, in)
	return in.Err
}

// StartApp starts an app of a mutable pod anew (app/start).
func (s *Supervisor) StartApp(name string) error {
	a := s.Find(name)
	if a == nil {
		return fmt.Errorf("no app named %q in the pod", name)
	}
	in := &Input{Op: true}
	s.Fire(a, Start, in)
	return in.Err
}

// StopApp stops one app (app/stop); reply is called when it is finished,
// with ErrNotRunning at once if it was not running.
func (s *Supervisor) StopApp(name string, force bool, reply func(error)) {
	a := s.Find(name)
	if a == nil {
		reply(ErrNotRunning)
		return
	}
	e := Stop
	if force {
		e = ForceStop
	}
	s.Fire(a, e, &Input{Reply: reply})
}

// RmApp removes an app (app/rm), killing it first if it runs; reply is
// called once it is gone. It reports whether the app was in the pod.
func (s *Supervisor) RmApp(name string, reply func(error)) bool {
	a := s.Find(name)
	if a == nil {
		return false
	}
	s.Fire(a, Rm, &Input{Reply: reply})
	return true
}

// timed reports whether a's state has a deadline Tick acts on.
func timed(a *App) bool {
	switch a.state {
	case Cleaning, Backoff, Starting, Stopping:
		return true
	}
	return false
}

// Tick fires the deadlines that are due: restarts whose delay is over,
// SIGKILLs whose grace period is, set-ups that did not report in time, and
// the looks at cgroups being emptied.
// It returns when it next has something to do (zero: nothing planned).
func (s *Supervisor) Tick() time.Time {
	now := s.os.Now()
	// Cloned (Fire may change the list) only when some app waits on the
	// clock: an idle pod's PID 1 runs this every second, and allocates
	// nothing then (its loop keeps few pages in memory: stage1-init/pid1's
	// shedUnusedMemory).
	apps := s.apps
	if slices.ContainsFunc(apps, timed) {
		apps = slices.Clone(apps)
	} else {
		apps = nil
	}
	for _, a := range apps {
		switch a.state {
		case Cleaning:
			switch {
			case s.os.Sweep(a):
				s.Fire(a, CgroupEmpty, nil)
			case !now.Before(a.deadline):
				s.Fire(a, CleanDeadline, nil)
			case !now.Before(a.recheckAt):
				a.recheck = min(a.recheck*2, maxRecheck)
				a.recheckAt = now.Add(a.recheck)
			}
		case Backoff:
			if !now.Before(a.deadline) {
				s.Fire(a, RestartTimer, nil)
			}
		case Starting:
			if !now.Before(a.deadline) {
				s.Fire(a, ReportDeadline, nil)
			}
		case Stopping:
			if !now.Before(a.deadline) {
				s.Fire(a, KillDeadline, nil)
			}
		}
	}
	var next time.Time
	for _, a := range s.apps {
		var t time.Time
		switch a.state {
		case Cleaning:
			t = a.recheckAt
			if a.deadline.Before(t) {
				t = a.deadline
			}
		case Backoff, Stopping, Starting:
			t = a.deadline
		default:
			continue
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// Flush ends the cleaning of every app being cleaned, at the pod's very
// end when nothing of it is left alive: each is finished.
func (s *Supervisor) Flush() {
	s.final = true
	for _, a := range slices.Clone(s.apps) {
		if a.state != Cleaning {
			continue
		}
		if s.os.Sweep(a) {
			s.Fire(a, CgroupEmpty, nil)
		} else {
			s.Fire(a, CleanDeadline, nil)
		}
	}
}

// write writes the app's JSON record, its state derived from the app's.
func (s *Supervisor) write(a *App) {
	a.Rec.App = a.Name
	a.Rec.State = a.recordState()
	s.os.WriteRecord(a)
}

// run starts a run of the app: Running, or the error that kept it from
// starting.
func (s *Supervisor) run(a *App) error {
	a.phase = firstPhase(a)
	p, err := s.os.Start(a)
	if err != nil {
		return err
	}
	now := s.os.Now()
	s.begin(a, p)
	a.starts = append(a.starts, now)
	if n := a.Cfg.Supervision.Burst; len(a.starts) > n {
		a.starts = a.starts[len(a.starts)-n:]
	}
	a.Rec.StartedAt, a.Rec.FinishedAt, a.Rec.ExitCode, a.Rec.Signal = &now, nil, nil, ""
	s.write(a)
	s.os.Debugf("app %q: started as pid %d (host pid %d)%s", a.Name, p.Pid, p.HostPid, handOverNote(p))
	s.os.Started(a)
	return nil
}

// begin records the first process of a run's phase: the app is Running,
// or Starting (its report deadline armed) while a set-up process hands
// the app's process over.
func (s *Supervisor) begin(a *App, p Proc) {
	a.Pid, a.deadline, a.setupEnded, a.awaiting, a.stopAsked = p.Pid, time.Time{}, false, p.HandOver, false
	if p.HandOver {
		// The record shows the app's process once it is known.
		now := s.os.Now()
		a.state, a.deadline = Starting, now.Add(ReportTimeout)
		a.setupCPU, a.setupLimit = 0, now.Add(ReportLimit)
		a.Rec.PodPid, a.Rec.Pid = 0, 0
		return
	}
	a.state = Running
	a.Rec.PodPid, a.Rec.Pid = p.Pid, p.HostPid
}

// setupBusy reports whether a's set-up, at its report deadline, used the
// CPU since the last look and may have another ReportTimeout; it then
// has it.
func (s *Supervisor) setupBusy(a *App) bool {
	if a.stopAsked || a.setupEnded {
		return false
	}
	now := s.os.Now()
	cpu, ok := s.os.SetupCPU(a)
	if !ok || cpu <= a.setupCPU || !now.Before(a.setupLimit) {
		return false
	}
	a.setupCPU, a.deadline = cpu, now.Add(ReportTimeout)
	if a.deadline.After(a.setupLimit) {
		a.deadline = a.setupLimit
	}
	s.os.Debugf("app %q: its set-up has not reported yet but is busy (%v of CPU): waiting on", a.Name, cpu)
	return true
}

func handOverNote(p Proc) string {
	if p.HandOver {
		return ", a set-up process that reports the app's"
	}
	return ""
}

// adopt makes the reported process the app's (a post-stop handler of an
// app or a pod being stopped gets its grace period, as postStop gives
// it).
func (s *Supervisor) adopt(a *App, pid int) {
	hostPid := s.os.Adopt(a, pid)
	a.Pid, a.awaiting = pid, false
	a.Rec.PodPid, a.Rec.Pid = pid, hostPid
	s.os.Debugf("app %q: %v is pid %d (host pid %d)", a.Name, a.phase, pid, hostPid)
}

// running makes an app whose process is now known Running (Stopping for a
// post-stop handler of an app or a pod being stopped).
func (s *Supervisor) running(a *App) {
	a.state, a.deadline = Running, time.Time{}
	if a.phase == PhasePostStop && (s.stopping || a.fate != fateRestart) {
		a.state, a.deadline = Stopping, s.os.Now().Add(a.Cfg.Supervision.Grace)
	}
}

// runOrFail starts a run; one that cannot start finishes the app with the
// stage1 failure code, and the pod policy applies as for any other end.
func (s *Supervisor) runOrFail(a *App) {
	if err := s.run(a); err != nil {
		s.os.Logf(Warning, "app %q: start: %v", a.Name, err)
		a.Rec.LastFailure = status.ReasonSetup
		s.finish(a, status.CodeStage1Failure)
	}
}

// ended records the end of the app's process and starts emptying its
// cgroup (Cleaning), which may be over at once.
func (s *Supervisor) ended(a *App, ws unix.WaitStatus, t time.Time) {
	if a.phase != PhaseMain {
		s.os.Debugf("app %q: %v pid %d ended: status %#x, code %d", a.Name, a.phase, a.Pid, uint32(ws), status.FromWaitStatus(ws))
	} else {
		s.os.Debugf("app %q: pid %d ended: status %#x, code %d", a.Name, a.Pid, uint32(ws), status.FromWaitStatus(ws))
	}
	if s.handlerEnded(a, ws, t) {
		return
	}
	s.record(a, status.FromWaitStatus(ws), ws, t)
	s.clean(a)
}

// record records the end of the run: its code, time and how it ended.
func (s *Supervisor) record(a *App, code int, ws unix.WaitStatus, t time.Time) {
	a.Pid, a.code, a.ended = 0, code, t
	a.Rec.ExitCode, a.Rec.FinishedAt, a.Rec.Signal, a.Rec.Pid, a.Rec.PodPid = &code, &t, "", 0, 0
	if ws.Signaled() {
		a.Rec.Signal = unix.SignalName(ws.Signal())
	}
	if r := failureReason(ws, code); r != "" {
		a.Rec.LastFailure = r
	}
}

// clean starts emptying the app's cgroup (Cleaning), which may be over at
// once.
func (s *Supervisor) clean(a *App) {
	now := s.os.Now()
	a.state, a.deadline = Cleaning, now.Add(CleanTimeout)
	a.recheck = firstRecheck
	a.recheckAt = now.Add(a.recheck)
	if s.os.Sweep(a) {
		s.Fire(a, CgroupEmpty, nil)
	}
}

// settle ends a Cleaning app's run: a restart if its policy asks for one,
// else the app is finished.
func (s *Supervisor) settle(a *App) {
	if s.postStop(a) {
		return
	}
	if !s.restart(a) {
		s.finish(a, a.code)
	}
}

// restart decides whether the app runs again and, if so, schedules it
// (Backoff).
func (s *Supervisor) restart(a *App) bool {
	sup := &a.Cfg.Supervision
	if s.stopping || a.fate != fateRestart || sup.Restart == podplan.RestartNever || sup.Restart == podplan.RestartOnFailure && a.code == 0 {
		return false
	}
	// A run that lasted as long as the longest backoff resets it: the
	// app is not crash-looping.
	if len(a.starts) > 0 && a.ended.Sub(a.starts[len(a.starts)-1]) >= sup.BackoffMax {
		a.backoff = sup.Backoff
	}
	next := a.ended.Add(a.backoff)
	recent := 0
	for _, t := range a.starts {
		if next.Sub(t) < sup.Interval {
			recent++
		}
	}
	if recent >= sup.Burst {
		s.os.Logf(Warning, "app %q: start limit hit (%d starts within %v), failed for good", a.Name, sup.Burst, sup.Interval)
		return false
	}
	a.state, a.deadline = Backoff, next
	a.backoff = min(a.backoff*2, sup.BackoffMax)
	s.write(a)
	s.os.Debugf("app %q: restarting in %v", a.Name, next.Sub(a.ended))
	return true
}

// finish marks the app finished for good (Exited, or Removed when it is
// being removed): the plain status file (the one rkt reads) is written now
// and only now, whoever waited is answered, then the pod's exit policy
// applies.
func (s *Supervisor) finish(a *App, code int) {
	a.state, a.deadline = Exited, time.Time{}
	if a.Rec.ExitCode == nil {
		a.Rec.ExitCode = &code
	}
	code = s.statusCode(a, code)
	// The record first: the status's durable write (fsync of the file
	// and of the directory) then makes both durable at once. One of the
	// pod's last statuses comes first instead: its commit, the lock
	// keeper's fsyncs, starts with it and is on the way to the lock's
	// release, and the record's write (0.25 ms traced) comes while the
	// keeper fsyncs the status, before its fsync of the directory but
	// for a PID 1 descheduled for longer. A record is durable with the
	// next fsync of the directory and no sooner (status.WriteRecord);
	// the status is what rkt and the host tools read an app's end from.
	if last := s.lastStatus(a); last {
		s.os.WriteStatus(a.Name, code, true)
		s.write(a)
	} else {
		s.write(a)
		s.os.WriteStatus(a.Name, code, false)
	}
	ws := a.waiters
	a.waiters = nil
	if a.fate == fateRemove {
		s.remove(a)
	}
	for _, r := range ws {
		r(nil)
	}
	// In a mutable pod apps come and go; only a stop ends the pod.
	if s.stopping || s.mutable {
		return
	}
	switch s.exitPolicy {
	case podplan.ExitAnyApp:
		s.podCode = code
		s.StopPod(fmt.Sprintf("app %q finished with %d", a.Name, code), false)
	case podplan.ExitMainApp:
		if a.Name == s.mainApp {
			s.podCode = code
			s.StopPod(fmt.Sprintf("main app %q finished with %d", a.Name, code), false)
		}
	default:
		if code != 0 {
			s.podCode = code
			s.failStop = !s.stopping
			s.StopPod(fmt.Sprintf("app %q failed with %d", a.Name, code), false)
		}
	}
}

// statusCode is the code the app's status file records for a run that
// ended with code. A sibling the pod stopped because another app failed,
// and that the pod's signal ended, records 0, as rkt's stage1 records it
// (rkt status, TestExitCodeWithSeveralApps): the failure is the other
// app's, whose code is the pod's. The record keeps the truth: the code
// and signal it ended with, that the pod stopped it, and the status
// file's code.
func (s *Supervisor) statusCode(a *App, code int) int {
	if !s.failStop || !a.podStopped || a.Rec.Signal != unix.SignalName(unix.SIGTERM) && a.Rec.Signal != unix.SignalName(unix.SIGKILL) {
		return code
	}
	zero := 0
	a.Rec.StoppedByPod, a.Rec.StatusCode = true, &zero
	return 0
}

// lastStatus reports whether the final status of a, which has just
// finished, comes as the pod ends: the pod is stopping, or it is over with
// this app, and no app operation waits for it (its caller may read the
// status as soon as it is answered).
func (s *Supervisor) lastStatus(a *App) bool {
	return len(a.waiters) == 0 && (s.stopping || s.final || s.Over())
}

// remove drops an app that is not running from the pod (Removed).
func (s *Supervisor) remove(a *App) {
	a.state = Removed
	s.apps = slices.DeleteFunc(s.apps, func(x *App) bool { return x == a })
	s.os.Forget(a)
	s.os.Debugf("app %q: removed", a.Name)
}

// term sends SIGTERM and arms the kill deadline (Stopping).
func (s *Supervisor) term(a *App) {
	a.state, a.deadline = Stopping, s.os.Now().Add(a.Cfg.Supervision.Grace)
	s.os.Signal(a, unix.SIGTERM)
}

// kill sends SIGKILL (Killing).
func (s *Supervisor) kill(a *App) {
	a.state, a.deadline = Killing, time.Time{}
	s.os.Kill(a)
}

// wait queues the reply of an operation answered when the app is
// finished.
func (a *App) wait(in *Input) {
	if in.Reply != nil {
		a.waiters = append(a.waiters, in.Reply)
	}
}

// failureReason classifies the end of a run that failed.
func failureReason(ws unix.WaitStatus, code int) string {
	switch {
	case ws.Signaled():
		return status.ReasonSignal
	case code == status.CodeExecNotFound || code == status.CodeExecNotPermitted:
		return status.ReasonExec
	case code == status.CodeStage1Failure:
		return status.ReasonSetup
	case code != 0:
		return status.ReasonExit
	}
	return ""
}
