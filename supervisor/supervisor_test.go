package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/status"
)

// fakeOS is the system as the supervisor sees it, with a clock the test
// moves and processes that exist only as pids.
type fakeOS struct {
	t        *testing.T
	now      time.Time
	nextPid  int
	startErr error
	// full marks the apps whose cgroup still holds processes.
	full map[*App]bool
	oom  bool
	// cpu is the CPU time each app's set-up has used (none: unknown).
	cpu map[*App]time.Duration
	// calls lists every call that acts (not Now, not the logs).
	calls    []string
	records  map[string][]string // record states written, per app
	statuses map[string]int
	last     map[string]bool // WriteStatus's last, per app
	logs     []string
	levels   []Level
}

func newFakeOS(t *testing.T) *fakeOS {
	return &fakeOS{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), nextPid: 100,
		full: map[*App]bool{}, cpu: map[*App]time.Duration{}, records: map[string][]string{}, statuses: map[string]int{}, last: map[string]bool{}}
}

func (f *fakeOS) Now() time.Time { return f.now }
func (f *fakeOS) call(format string, a ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

func (f *fakeOS) Start(a *App) (Proc, error) {
	f.call("start %s", a.Name)
	if f.startErr != nil {
		return Proc{}, f.startErr
	}
	f.nextPid++
	// An app in a user namespace starts with a set-up process, as
	// stage1-init's does.
	return Proc{Pid: f.nextPid, HostPid: f.nextPid + 1000, HandOver: a.Cfg.Spec.UserNS != nil}, nil
}
func (f *fakeOS) Adopt(a *App, pid int) int {
	f.call("adopt %s %d (set-up %d)", a.Name, pid, a.Pid)
	return pid + 1000
}
func (f *fakeOS) Started(a *App) { f.call("started %s", a.Name) }
func (f *fakeOS) SetupCPU(a *App) (time.Duration, bool) {
	d, ok := f.cpu[a]
	return d, ok
}
func (f *fakeOS) Signal(a *App, sig unix.Signal) {
	f.call("signal %s %s", a.Name, unix.SignalName(sig))
}
func (f *fakeOS) Kill(a *App) { f.call("kill %s", a.Name) }
func (f *fakeOS) Sweep(a *App) bool {
	f.call("sweep %s", a.Name)
	return !f.full[a]
}
func (f *fakeOS) Release(a *App) bool {
	f.call("release %s", a.Name)
	return f.oom
}
func (f *fakeOS) WriteRecord(a *App) {
	f.call("record %s %s", a.Name, a.Rec.State)
	f.records[a.Name] = append(f.records[a.Name], a.Rec.State)
}
func (f *fakeOS) WriteStatus(name string, code int, last bool) {
	f.call("status %s %d", name, code)
	f.statuses[name] = code
	f.last[name] = last
}
func (f *fakeOS) ClearStatus(name string) {
	f.call("clear %s", name)
	delete(f.statuses, name)
}
func (f *fakeOS) Forget(a *App) { f.call("forget %s", a.Name) }
func (f *fakeOS) Logf(level Level, format string, args ...any) {
	f.levels = append(f.levels, level)
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *fakeOS) Debugf(format string, args ...any) {}

func (f *fakeOS) advance(d time.Duration) { f.now = f.now.Add(d) }

func appCfg(name, restart string) podplan.App {
	return podplan.App{Spec: appexec.Spec{Name: name}, Supervision: podplan.Supervision{
		Restart: restart, Backoff: 100 * time.Millisecond, BackoffMax: time.Second,
		Burst: 5, Interval: 10 * time.Second, Grace: 2 * time.Second,
	}}
}

func newPod(f *fakeOS, mutable bool, apps ...podplan.App) *Supervisor {
	return New(f, &podplan.Pod{Apps: apps, Mutable: mutable})
}

var (
	exit0    = unix.WaitStatus(0)
	exit1    = unix.WaitStatus(1 << 8)
	sigterm  = unix.WaitStatus(unix.SIGTERM)
	sigkill  = unix.WaitStatus(unix.SIGKILL)
	allState = func() (out []State) {
		for s := State(0); s < numStates; s++ {
			out = append(out, s)
		}
		return out
	}()
)

// Every cell of the table is written out (none left to the zero value).
func TestTableIsComplete(t *testing.T) {
	for s := State(0); s < numStates; s++ {
		for e := Event(0); e < numEvents; e++ {
			c := table[s][e]
			if c.do == nil || c.doc == "" {
				t.Errorf("%v x %v: no entry", s, e)
			}
			if c.impossible && len(c.to) > 0 {
				t.Errorf("%v x %v: impossible, yet leads to %v", s, e, c.to)
			}
		}
	}
}

// A path brings a fresh app to a state.
type path struct {
	name string
	to   State
	// restart is the app's policy on this path.
	restart string
	steps   func(s *Supervisor, f *fakeOS, a *App)
	// handlers: the app has a pre-start and a post-stop handler.
	handlers bool
	// userns: the app runs in a user namespace (its runs start with a
	// set-up process: Starting).
	userns bool
}

func paths() []path {
	start := func(s *Supervisor, f *fakeOS, a *App) { s.Fire(a, Start, nil) }
	then := func(fs ...func(s *Supervisor, f *fakeOS, a *App)) func(s *Supervisor, f *fakeOS, a *App) {
		return func(s *Supervisor, f *fakeOS, a *App) {
			for _, fn := range fs {
				fn(s, f, a)
			}
		}
	}
	ev := func(e Event) func(s *Supervisor, f *fakeOS, a *App) {
		return func(s *Supervisor, f *fakeOS, a *App) { s.Fire(a, e, &Input{Status: exit1, Time: f.now}) }
	}
	fill := func(s *Supervisor, f *fakeOS, a *App) { f.full[a] = true }
	report := func(pid int) func(s *Supervisor, f *fakeOS, a *App) {
		return func(s *Supervisor, f *fakeOS, a *App) { s.Report(a, pid) }
	}
	var ps []path
	for _, r := range []string{podplan.RestartNever, podplan.RestartAlways} {
		ps = append(ps,
			path{"idle", Idle, r, then(), false, false},
			path{"removed by rm", Removed, r, ev(Rm), false, false},
			path{"running", Running, r, start, false, false},
			path{"stopping by stop", Stopping, r, then(start, ev(Stop)), false, false},
			path{"stopping by pod stop", Stopping, r, then(start, ev(PodStop)), false, false},
			path{"killing by force stop", Killing, r, then(start, ev(ForceStop)), false, false},
			path{"killing by rm", Killing, r, then(start, ev(Rm)), false, false},
			path{"killing by kill deadline", Killing, r, then(start, ev(Stop), ev(KillDeadline)), false, false},
			path{"cleaning", Cleaning, r, then(start, fill, ev(Exit)), false, false},
			path{"cleaning after stop", Cleaning, r, then(start, ev(Stop), fill, ev(Exit)), false, false},
			path{"cleaning after rm", Cleaning, r, then(start, ev(Rm), fill, ev(Exit)), false, false},
			path{"exited", Exited, r, then(start, ev(Stop), ev(Exit)), false, false},
		)
	}
	// An app with eventHandlers: its run begins with the pre-start
	// handler (Running), and its post-stop handler runs once the run is
	// over (Running, or Stopping when a stop was asked).
	ps = append(ps, []path{
		{"pre-start running", Running, podplan.RestartNever, start, true, false},
		{"pre-start stopping", Stopping, podplan.RestartNever, then(start, ev(Stop)), true, false},
		{"pre-start killing", Killing, podplan.RestartNever, then(start, ev(ForceStop)), true, false},
		{"pre-start failed, cleaning", Cleaning, podplan.RestartNever, then(start, fill, ev(Exit)), true, false},
		{"stopped, cleaning", Cleaning, podplan.RestartAlways, then(start, ev(Stop), fill, ev(Exit)), true, false},
		{"post-stop running", Running, podplan.RestartAlways, then(start, ev(Exit)), true, false},
		{"post-stop stopping", Stopping, podplan.RestartAlways, then(start, ev(Stop), ev(Exit)), true, false},
	}...)
	// An app in a user namespace: each process of a run begins as a
	// set-up process, Starting until it reports the app's.
	for _, r := range []string{podplan.RestartNever, podplan.RestartAlways} {
		ps = append(ps, []path{
			{"starting", Starting, r, start, false, true},
			{"starting, set-up ended", Starting, r, then(start, ev(Exit)), false, true},
			{"starting, reported", Running, r, then(start, report(4242)), false, true},
			{"starting, reported none", Running, r, then(start, report(0)), false, true},
			{"killing by stop while starting", Killing, r, then(start, ev(Stop)), false, true},
			{"killing by rm while starting", Killing, r, then(start, ev(Rm)), false, true},
			{"killing by stop while starting, set-up ended", Killing, r, then(start, ev(Exit), ev(Stop)), false, true},
			{"killing by report deadline", Killing, r, then(start, ev(ReportDeadline)), false, true},
			{"cleaning, report to come", Cleaning, r, then(start, ev(Stop), fill, ev(Exit)), false, true},
			{"exited, report to come", Exited, r, then(start, ev(Stop), ev(Exit)), false, true},
			{"idle, user namespace", Idle, r, then(), false, true},
			{"killing by rm while starting, set-up ended", Killing, r, then(start, ev(Exit), ev(Rm)), false, true},
			{"pre-start starting", Starting, r, start, true, true},
			{"pre-start starting, set-up ended", Starting, r, then(start, ev(Exit)), true, true},
			{"pre-start running, user namespace", Running, r, then(start, report(4242)), true, true},
			{"pre-start stopping, user namespace", Stopping, r, then(start, report(4242), ev(Stop)), true, true},
			{"pre-start killing, user namespace", Killing, r, then(start, report(4242), ev(ForceStop)), true, true},
			{"pre-start killed while starting", Killing, r, then(start, ev(Exit), ev(Stop)), true, true},
			{"stopped, cleaning, user namespace", Cleaning, r, then(start, report(4242), ev(Stop), fill, ev(Exit)), true, true},
			{"post-stop starting after stop", Starting, r, then(start, report(4242), ev(Stop), ev(Exit)), true, true},
		}...)
	}
	ps = append(ps,
		path{"backoff after report deadline", Backoff, podplan.RestartAlways, then(start, ev(ReportDeadline), ev(Exit)), false, true},
		path{"backoff", Backoff, podplan.RestartAlways, then(start, ev(Exit)), false, false},
		path{"exited by policy", Exited, podplan.RestartNever, then(start, ev(Exit)), false, false},
		path{"exited by failed start", Exited, podplan.RestartAlways, then(
			func(s *Supervisor, f *fakeOS, a *App) { f.startErr = errors.New("no") }, start,
			func(s *Supervisor, f *fakeOS, a *App) { f.startErr = nil }), false, false},
	)
	return ps
}

// Every cell of the table, fired from every way of reaching its state and
// under every variant of the world (a start that fails, a cgroup that
// holds leftovers, an app/start rather than the pod's start, a mutable pod
// or not): the app ends only in the states the cell lists (its own when it
// lists none), each listed state is reached, and an impossible pair
// changes nothing and says so.
func TestEveryTransition(t *testing.T) {
	type variant struct{ startErr, full, op, mutable, exit0, reported bool }
	var variants []variant
	for i := 0; i < 64; i++ {
		variants = append(variants, variant{i&1 != 0, i&2 != 0, i&4 != 0, i&8 != 0, i&16 != 0, i&32 != 0})
	}
	reached := map[[2]int]map[State]bool{}
	fired := map[[2]int]bool{}
	for _, p := range paths() {
		for e := Event(0); e < numEvents; e++ {
			for _, v := range variants {
				name := fmt.Sprintf("%s/%v/%+v", p.name, e, v)
				f := newFakeOS(t)
				cfg := appCfg("a", p.restart)
				if p.handlers {
					cfg.PreStart, cfg.PostStop = []string{"/pre"}, []string{"/post"}
				}
				if p.userns {
					cfg.Spec.UserNS = &idmap.Range{HostID: 100000, Size: 65536}
				}
				s := newPod(f, v.mutable, cfg)
				a := s.apps[0]
				p.steps(s, f, a)
				if a.state != p.to {
					t.Fatalf("%s: path reached %v, want %v", name, a.state, p.to)
				}
				c := table[a.state][e]
				key := [2]int{int(p.to), int(e)}
				fired[key] = true
				f.startErr = nil
				if v.startErr {
					f.startErr = errors.New("no")
				}
				f.full[a] = v.full
				f.calls = nil
				nlogs := len(f.logs)
				ws := exit1
				if v.exit0 {
					ws = exit0
				}
				in := &Input{Status: ws, Time: f.now, Op: v.op, Reply: func(error) {}, Save: func() error { return f.startErr }}
				if v.reported {
					in.Pid = 4242
				}
				s.Fire(a, e, in)
				if c.impossible {
					if !errors.Is(in.Err, errImpossible) || a.state != p.to || len(f.calls) != 0 || len(f.logs) != nlogs+1 {
						t.Errorf("%s: impossible pair: err %v, state %v, calls %q, logs %q", name, in.Err, a.state, f.calls, f.logs[nlogs:])
					}
					continue
				}
				want := c.to
				if len(want) == 0 {
					want = []State{p.to}
				}
				if !slices.Contains(want, a.state) {
					t.Errorf("%s: ended in %v, the table says %v", name, a.state, want)
				}
				if reached[key] == nil {
					reached[key] = map[State]bool{}
				}
				reached[key][a.state] = true
				if a.state == Removed && s.Find("a") != nil || a.state != Removed && p.to != Removed && s.Find("a") != a {
					t.Errorf("%s: state %v but in the pod: %v", name, a.state, s.Find("a") != nil)
				}
			}
		}
	}
	for st := State(0); st < numStates; st++ {
		for e := Event(0); e < numEvents; e++ {
			key := [2]int{int(st), int(e)}
			if !fired[key] {
				t.Errorf("%v x %v never fired", st, e)
				continue
			}
			c := table[st][e]
			if c.impossible {
				continue
			}
			for _, want := range c.to {
				if !reached[key][want] {
					t.Errorf("%v x %v: never led to %v (reached %v)", st, e, want, reached[key])
				}
			}
		}
	}
}

// What happens when an app exits while it is being stopped: the exit is
// the stop's end. It is finished with the code it ended with (143 for the
// SIGTERM), never restarted, and the stop is answered then, once.
func TestExitWhileStopping(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, true, appCfg("a", podplan.RestartAlways))
	a := s.apps[0]
	s.Fire(a, Start, nil)
	var answers []error
	s.StopApp("a", false, func(err error) { answers = append(answers, err) })
	if a.state != Stopping || !slices.Contains(f.calls, "signal a SIGTERM") {
		t.Fatalf("state %v, calls %q", a.state, f.calls)
	}
	f.full[a] = true
	s.Exit(a, sigterm, f.now)
	if a.state != Cleaning || len(answers) != 0 {
		t.Fatalf("after the exit: %v, answers %v", a.state, answers)
	}
	// Cleaning answers "already running" to a start.
	if err := s.StartApp("a"); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("start while cleaning: %v", err)
	}
	f.full[a] = false
	f.advance(time.Millisecond)
	s.Tick()
	if a.state != Exited || len(answers) != 1 || answers[0] != nil || f.statuses["a"] != 143 {
		t.Fatalf("state %v, answers %v, status %d", a.state, answers, f.statuses["a"])
	}
	// The kill deadline went with the state: nothing fires later.
	f.advance(time.Hour)
	f.calls = nil
	if next := s.Tick(); !next.IsZero() || len(f.calls) != 0 {
		t.Fatalf("after the end: next %v, calls %q", next, f.calls)
	}
	if got := f.records["a"]; got[len(got)-1] != status.StateExited {
		t.Fatalf("records %v", got)
	}
}

// A crash-looping app restarts after 100, 200, 400, 800 ms, then hits its
// start limit (5 starts within 10 s) and is finished with its last code.
func TestRestartWithBackoff(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, appCfg("a", podplan.RestartAlways))
	a := s.apps[0]
	s.StartAll(func() bool { return false })
	for i, backoff := range []time.Duration{100, 200, 400, 800} {
		backoff *= time.Millisecond
		f.advance(10 * time.Millisecond)
		s.Exit(a, exit1, f.now)
		if a.state != Backoff {
			t.Fatalf("exit %d: %v", i, a.state)
		}
		if got := f.records["a"][len(f.records["a"])-1]; got != status.StateRestarting {
			t.Fatalf("record %s", got)
		}
		next := s.Tick()
		if want := f.now.Add(backoff); !next.Equal(want) {
			t.Fatalf("exit %d: next %v, want in %v", i, next.Sub(f.now), backoff)
		}
		f.advance(backoff - time.Microsecond)
		s.Tick()
		if a.state != Backoff {
			t.Fatalf("restarted early")
		}
		f.advance(time.Microsecond)
		s.Tick()
		if a.state != Running || a.Rec.RestartCount != i+1 {
			t.Fatalf("exit %d: %v, restarts %d", i, a.state, a.Rec.RestartCount)
		}
	}
	s.Exit(a, exit1, f.now)
	if a.state != Exited || f.statuses["a"] != 1 || !s.Over() || s.Code() != 1 {
		t.Fatalf("after the limit: %v, status %v, over %v, code %d", a.state, f.statuses, s.Over(), s.Code())
	}
}

// app/rm of a running app kills it at once; it leaves the pod once its
// cgroup is empty, and only then is rm answered.
func TestRmWhileRunning(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, true)
	if err := s.AddApp(ptr(appCfg("a", podplan.RestartAlways)), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.AddApp(ptr(appCfg("a", podplan.RestartAlways)), nil); err == nil {
		t.Fatal("added twice")
	}
	if err := s.StartApp("a"); err != nil {
		t.Fatal(err)
	}
	a := s.Find("a")
	done := 0
	if !s.RmApp("a", func(err error) { done++ }) {
		t.Fatal("rm: not found")
	}
	if a.state != Killing || !slices.Contains(f.calls, "kill a") || done != 0 {
		t.Fatalf("state %v, calls %q", a.state, f.calls)
	}
	if got := f.records["a"][len(f.records["a"])-1]; got != status.StateRemoving {
		t.Fatalf("record %s", got)
	}
	f.full[a] = true
	s.Exit(a, sigkill, f.now)
	f.advance(CleanTimeout / 2)
	s.Tick()
	if a.state != Cleaning || done != 0 {
		t.Fatalf("state %v, answered %d", a.state, done)
	}
	f.full[a] = false
	s.Tick()
	if a.state != Removed || done != 1 || s.Find("a") != nil || !slices.Contains(f.calls, "forget a") {
		t.Fatalf("state %v, answered %d, calls %q", a.state, done, f.calls)
	}
	if s.Over() {
		t.Fatal("a mutable pod is over only when stopped")
	}
	s.StopPod("test", false)
	if !s.Over() {
		t.Fatal("not over")
	}
}

func ptr[T any](v T) *T { return &v }

// A pod stop finishes an app waiting to restart with its last code at
// once, and gives a running one its grace period, then SIGKILL.
func TestPodStopWithARestartingApp(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, appCfg("r", podplan.RestartAlways), appCfg("b", podplan.RestartNever))
	s.StartAll(func() bool { return false })
	r, b := s.Find("r"), s.Find("b")
	s.Exit(r, exit1, f.now)
	if r.state != Backoff {
		t.Fatalf("r: %v", r.state)
	}
	s.StopPod("test", false)
	if r.state != Exited || f.statuses["r"] != 1 || b.state != Stopping {
		t.Fatalf("r %v (status %v), b %v", r.state, f.statuses, b.state)
	}
	if next := s.Tick(); !next.Equal(f.now.Add(2 * time.Second)) {
		t.Fatalf("next %v", next)
	}
	f.advance(2 * time.Second)
	s.Tick()
	if b.state != Killing || !slices.Contains(f.calls, "kill b") {
		t.Fatalf("b %v", b.state)
	}
	if s.Over() {
		t.Fatal("over with b alive")
	}
	s.Exit(b, sigkill, f.now)
	if !s.Over() || f.statuses["b"] != 137 || s.Code() != 0 {
		t.Fatalf("over %v, statuses %v, code %d", s.Over(), f.statuses, s.Code())
	}
}

// app/stop --force of a restart-always app stops it for good.
func TestForceStopDoesNotRestart(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, true, appCfg("a", podplan.RestartAlways))
	a := s.apps[0]
	s.Fire(a, Start, nil)
	s.StopApp("a", true, func(error) {})
	s.Exit(a, sigkill, f.now)
	if a.state != Exited {
		t.Fatalf("state %v", a.state)
	}
}

// A cgroup that never empties holds the app at most CleanTimeout; the
// loop is woken to look at it meanwhile, never blocked.
func TestCleanDeadline(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, appCfg("a", podplan.RestartNever))
	a := s.apps[0]
	s.Fire(a, Start, nil)
	f.full[a] = true
	s.Exit(a, exit0, f.now)
	end := f.now.Add(CleanTimeout)
	for i := 0; a.state == Cleaning; i++ {
		next := s.Tick()
		if a.state != Cleaning {
			break
		}
		if next.IsZero() || next.After(end) || i > 1000 {
			t.Fatalf("next %v", next)
		}
		f.now = next
	}
	if a.state != Exited || f.now.Before(end) || slices.Contains(f.calls, "release a") {
		t.Fatalf("state %v at %v", a.state, f.now.Sub(end))
	}
}

// A stop asked while the pod starts is acted on before the next app
// starts: the apps not started are finished with 254.
func TestStopDuringStartAll(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, appCfg("a", podplan.RestartNever), appCfg("b", podplan.RestartNever))
	n := 0
	s.StartAll(func() bool {
		n++
		if n == 2 {
			s.StopPod("signal", false)
		}
		return s.Stopping()
	})
	if s.Find("a").state != Stopping || s.Find("b").state != Exited || f.statuses["b"] != status.CodeStage1Failure {
		t.Fatalf("a %v, b %v", s.Find("a").state, s.Find("b").state)
	}
}

func TestStateNames(t *testing.T) {
	for _, s := range allState {
		if strings.HasPrefix(s.String(), "state(") {
			t.Errorf("%d has no name", s)
		}
	}
	if Event(numEvents).String() != "event(14)" {
		t.Error(Event(numEvents).String())
	}
}

// An app in a user namespace starts with a set-up process: the app is
// Starting, its record without a pid, until the set-up reports the app's
// process, which is then adopted. The set-up's own end before its report
// is read changes nothing; with nothing reported, that end is the run's.
// A set-up that never reports is killed at its report deadline, which the
// loop is woken for; the other apps go on meanwhile.
func TestUserNSHandOver(t *testing.T) {
	userns := func(name, restart string) podplan.App {
		c := appCfg(name, restart)
		c.Spec.UserNS = &idmap.Range{HostID: 100000, Size: 65536}
		return c
	}
	t.Run("reported", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, false, userns("a", podplan.RestartNever))
		a := s.apps[0]
		s.StartAll(func() bool { return false })
		setup := a.Pid
		if a.state != Starting || a.Rec.Pid != 0 || a.Rec.State != status.StateRunning {
			t.Fatalf("state %v, record %+v", a.state, a.Rec)
		}
		if next := s.Tick(); !next.Equal(f.now.Add(ReportTimeout)) {
			t.Fatalf("next %v", next)
		}
		s.Exit(a, exit0, f.now)
		if a.state != Starting || a.Pid != 0 {
			t.Fatalf("after the set-up's end: %v pid %d", a.state, a.Pid)
		}
		s.Report(a, 4242)
		if a.state != Running || a.Pid != 4242 || a.Rec.Pid != 5242 || !slices.Contains(f.calls, "adopt a 4242 (set-up 0)") {
			t.Fatalf("state %v pid %d record %+v calls %q (set-up was %d)", a.state, a.Pid, a.Rec, f.calls, setup)
		}
		s.Exit(a, exit1, f.now)
		if a.state != Exited || f.statuses["a"] != 1 {
			t.Fatalf("state %v statuses %v", a.state, f.statuses)
		}
	})
	t.Run("none reported", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, false, userns("a", podplan.RestartNever))
		a := s.apps[0]
		s.StartAll(func() bool { return false })
		s.Exit(a, unix.WaitStatus(status.CodeStage1Failure<<8), f.now)
		s.Report(a, 0)
		if a.state != Exited || f.statuses["a"] != status.CodeStage1Failure || a.Rec.LastFailure != status.ReasonSetup {
			t.Fatalf("state %v statuses %v record %+v", a.state, f.statuses, a.Rec)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, false, userns("stuck", podplan.RestartNever), appCfg("b", podplan.RestartNever))
		stuck, b := s.Find("stuck"), s.Find("b")
		s.StartAll(func() bool { return false })
		if stuck.state != Starting || b.state != Running {
			t.Fatalf("stuck %v, b %v", stuck.state, b.state)
		}
		// b's end is handled while stuck is set up: its status is
		// written at once (a code 0 does not stop the pod).
		s.Exit(b, exit0, f.now)
		if b.state != Exited || f.statuses["b"] != 0 || stuck.state != Starting {
			t.Fatalf("b %v statuses %v stuck %v", b.state, f.statuses, stuck.state)
		}
		f.advance(ReportTimeout - time.Millisecond)
		s.Tick()
		if stuck.state != Starting {
			t.Fatalf("killed early: %v", stuck.state)
		}
		f.advance(time.Millisecond)
		s.Tick()
		if stuck.state != Killing || !slices.Contains(f.calls, "kill stuck") || len(f.logs) == 0 {
			t.Fatalf("at the deadline: %v, calls %q, logs %q", stuck.state, f.calls, f.logs)
		}
		// Its report comes as the EOF of the killed set-up: its end
		// is the run's.
		s.Report(stuck, 0)
		if stuck.state != Killing {
			t.Fatalf("after the EOF: %v", stuck.state)
		}
		s.Exit(stuck, sigkill, f.now)
		if stuck.state != Exited || f.statuses["stuck"] != 137 || !s.Over() || s.Code() != 137 {
			t.Fatalf("stuck %v statuses %v over %v code %d", stuck.state, f.statuses, s.Over(), s.Code())
		}
	})
	t.Run("busy set-up", func(t *testing.T) {
		// A set-up that uses the CPU (hundreds of apps starting on a
		// slow machine) waits on, each ReportTimeout that it used
		// some, up to ReportLimit.
		f := newFakeOS(t)
		s := newPod(f, false, userns("busy", podplan.RestartNever), userns("idle", podplan.RestartNever))
		busy, idle := s.Find("busy"), s.Find("idle")
		s.StartAll(func() bool { return false })
		f.cpu[busy], f.cpu[idle] = 10*time.Millisecond, 0
		f.advance(ReportTimeout)
		s.Tick()
		if busy.state != Starting || idle.state != Killing {
			t.Fatalf("at the first deadline: busy %v, idle %v", busy.state, idle.state)
		}
		// Busy again: another period. Then no CPU used since: killed.
		f.cpu[busy] = 20 * time.Millisecond
		f.advance(ReportTimeout)
		s.Tick()
		if busy.state != Starting {
			t.Fatalf("busy again: %v", busy.state)
		}
		f.advance(ReportTimeout)
		s.Tick()
		if busy.state != Killing || !slices.Contains(f.calls, "kill busy") {
			t.Fatalf("idle for a period: %v, calls %q", busy.state, f.calls)
		}
		// However busy, ReportLimit ends it.
		f = newFakeOS(t)
		s = newPod(f, false, userns("spin", podplan.RestartNever))
		spin := s.Find("spin")
		s.StartAll(func() bool { return false })
		t0 := f.now
		for i := 1; ; i++ {
			f.cpu[spin] = time.Duration(i) * time.Second
			next := s.Tick()
			if spin.state != Starting {
				break
			}
			if next.Sub(t0) > ReportLimit || !next.After(f.now) {
				t.Fatalf("next look at %v", next.Sub(t0))
			}
			f.now = next
		}
		if spin.state != Killing || f.now.Sub(t0) != ReportLimit {
			t.Fatalf("%v after %v; logs %q", spin.state, f.now.Sub(t0), f.logs)
		}
		if l := f.logs[len(f.logs)-1]; !strings.Contains(l, "busy for 5m0s") {
			t.Fatalf("log %q", l)
		}
		// A stop asked while it starts is not waited on past its grace.
		f = newFakeOS(t)
		s = newPod(f, false, userns("stopped", podplan.RestartNever))
		st := s.Find("stopped")
		s.StartAll(func() bool { return false })
		f.cpu[st] = time.Second
		s.StopPod("signal", false)
		f.now = s.Tick()
		s.Tick()
		if st.state != Killing {
			t.Fatalf("stopped while busy: %v", st.state)
		}
	})
	t.Run("pod stop", func(t *testing.T) {
		// The app's process may run already: it is stopped as a
		// running app is, gracefully, once reported.
		f := newFakeOS(t)
		s := newPod(f, false, userns("a", podplan.RestartAlways))
		a := s.apps[0]
		s.StartAll(func() bool { return false })
		s.StopPod("signal", false)
		if a.state != Starting || slices.Contains(f.calls, "kill a") {
			t.Fatalf("state %v calls %q", a.state, f.calls)
		}
		f.calls = nil
		s.Report(a, 4242)
		if a.Pid != 4242 || a.state != Stopping || !slices.Contains(f.calls, "signal a SIGTERM") {
			t.Fatalf("pid %d state %v calls %q", a.Pid, a.state, f.calls)
		}
		s.Exit(a, unix.WaitStatus(unix.SIGTERM), f.now)
		if a.state != Exited || !s.Over() || f.statuses["a"] != 143 {
			t.Fatalf("state %v over %v statuses %v", a.state, s.Over(), f.statuses)
		}
	})
	t.Run("pod force stop", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, false, userns("a", podplan.RestartAlways))
		a := s.apps[0]
		s.StartAll(func() bool { return false })
		s.StopPod("signal", true)
		if a.state != Killing || !slices.Contains(f.calls, "kill a") {
			t.Fatalf("state %v calls %q", a.state, f.calls)
		}
		// The set-up had reported before it was killed: the reported
		// process is adopted and killed, and its end is the run's.
		f.calls = nil
		s.Report(a, 4242)
		if a.Pid != 4242 || !slices.Equal(f.calls, []string{"adopt a 4242 (set-up 101)", "kill a"}) {
			t.Fatalf("pid %d calls %q", a.Pid, f.calls)
		}
		s.Exit(a, sigkill, f.now)
		if a.state != Exited || !s.Over() {
			t.Fatalf("state %v over %v", a.state, s.Over())
		}
	})
}

// The supervisor's lines have levels: a grace period that ran out is the
// supervision doing its job (info), a start that failed is a warning, an
// event that cannot happen in its state is a bug.
func TestLogLevels(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, true, appCfg("a", podplan.RestartNever))
	a := s.apps[0]
	s.Fire(a, Start, nil)
	s.StopApp("a", false, nil)
	f.advance(2 * time.Second)
	s.Tick()
	s.Fire(a, CgroupEmpty, nil)
	s.Exit(a, sigkill, f.now)
	f.startErr = errors.New("no")
	if err := s.StartApp("a"); err == nil {
		t.Fatal("started")
	}
	s.Fire(s.apps[0], RestartTimer, nil)
	if err := s.AddApp(ptr(appCfg("b", podplan.RestartNever)), nil); err != nil {
		t.Fatal(err)
	}
	b := s.Find("b")
	s.Fire(b, Start, nil)
	want := []Level{Info, Bug, Bug, Warning}
	if !slices.Equal(f.levels, want) {
		t.Fatalf("levels %v, want %v; lines %q", f.levels, want, f.logs)
	}
}

// app/start of an app in a user namespace is answered once it leaves
// Starting, not before; WhenStarted of an app not Starting declines.
func TestWhenStarted(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, true)
	c := appCfg("a", podplan.RestartNever)
	c.Spec.UserNS = &idmap.Range{HostID: 100000, Size: 65536}
	if err := s.AddApp(&c, nil); err != nil {
		t.Fatal(err)
	}
	if s.WhenStarted("a", func() { t.Fatal("called for an idle app") }) {
		t.Fatal("accepted for an idle app")
	}
	if err := s.StartApp("a"); err != nil {
		t.Fatal(err)
	}
	n := 0
	if !s.WhenStarted("a", func() { n++ }) {
		t.Fatal("declined for a starting app")
	}
	s.Exit(s.Find("a"), exit0, f.now)
	if n != 0 {
		t.Fatal("answered before the report")
	}
	s.Report(s.Find("a"), 4242)
	if n != 1 || s.Find("a").State() != Running {
		t.Fatalf("answered %d times, state %v", n, s.Find("a").State())
	}
}

// The pod's exit policy: by default only a failure ends the pod, with its
// code; any-app ends it at the first app to finish, main-app at the main
// app's end, each with that app's code; a mutable pod ends only when
// stopped.
func TestExitPolicies(t *testing.T) {
	for _, c := range []struct {
		policy, main string
		mutable      bool
		ends         string // the app whose end (exit 3) ends the pod
	}{
		{"", "", false, "b"},
		{podplan.ExitAnyApp, "", false, "a"},
		{podplan.ExitMainApp, "b", false, "b"},
		{podplan.ExitAnyApp, "", true, ""},
	} {
		f := newFakeOS(t)
		s := New(f, &podplan.Pod{Mutable: c.mutable, ExitPolicy: c.policy, MainApp: c.main,
			Apps: []podplan.App{appCfg("a", podplan.RestartNever), appCfg("b", podplan.RestartNever), appCfg("c", podplan.RestartNever)}})
		s.StartAll(func() bool { return false })
		name := fmt.Sprintf("policy %q main %q mutable %v", c.policy, c.main, c.mutable)
		s.Exit(s.Find("a"), exit0, f.now)
		if got := s.Stopping(); got != (c.ends == "a") {
			t.Errorf("%s: stopping after a's exit 0: %v", name, got)
		}
		if c.ends == "a" {
			if s.Code() != 0 || s.Find("b").state != Stopping || s.Find("c").state != Stopping {
				t.Errorf("%s: code %d, b %v, c %v", name, s.Code(), s.Find("b").state, s.Find("c").state)
			}
			continue
		}
		s.Exit(s.Find("b"), unix.WaitStatus(3<<8), f.now)
		if got := s.Stopping(); got != (c.ends == "b") {
			t.Errorf("%s: stopping after b's exit 3: %v", name, got)
		}
		if c.ends == "b" && (s.Code() != 3 || s.Find("c").state != Stopping) {
			t.Errorf("%s: code %d, c %v", name, s.Code(), s.Find("c").state)
		}
		if c.ends == "" && (s.Over() || s.Code() != 0) {
			t.Errorf("%s: over %v, code %d", name, s.Over(), s.Code())
		}
	}
}

// A run the kernel's OOM killer ended in its cgroup is recorded so.
func TestOOMKillRecorded(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, appCfg("a", podplan.RestartNever))
	a := s.apps[0]
	s.Fire(a, Start, nil)
	f.oom = true
	s.Exit(a, sigkill, f.now)
	if a.state != Exited || a.Rec.LastFailure != status.ReasonOOM || f.statuses["a"] != 137 {
		t.Fatalf("state %v, last failure %q, status %v", a.state, a.Rec.LastFailure, f.statuses)
	}
}

// At the pod's very end (nothing of it alive), Flush finishes every app
// still being cleaned: with its code, its cgroup released if it emptied,
// kept (and logged) if not; no post-stop handler starts any more.
func TestFlush(t *testing.T) {
	f := newFakeOS(t)
	pre := appCfg("h", podplan.RestartNever)
	pre.PostStop = []string{"/post"}
	s := newPod(f, false, appCfg("a", podplan.RestartNever), appCfg("b", podplan.RestartAlways), pre)
	s.StartAll(func() bool { return false })
	a, b, h := s.Find("a"), s.Find("b"), s.Find("h")
	f.full[a], f.full[b], f.full[h] = true, true, true
	s.StopPod("test", true)
	s.Exit(a, sigkill, f.now)
	s.Exit(b, sigkill, f.now)
	s.Exit(h, sigkill, f.now)
	if a.state != Cleaning || b.state != Cleaning || h.state != Cleaning {
		t.Fatalf("a %v, b %v, h %v", a.state, b.state, h.state)
	}
	f.full[a] = false
	f.calls, f.logs = nil, nil
	s.Flush()
	if !s.Over() || f.statuses["a"] != 137 || f.statuses["b"] != 137 || f.statuses["h"] != 137 {
		t.Fatalf("over %v, statuses %v", s.Over(), f.statuses)
	}
	if !slices.Contains(f.calls, "release a") || slices.Contains(f.calls, "release b") || slices.Contains(f.calls, "start h") {
		t.Fatalf("calls %q", f.calls)
	}
	if len(f.logs) != 2 {
		t.Fatalf("logs %q", f.logs)
	}
}

// A final status is said to be the pod's last (its commit may wait for the
// pod's end) only when the pod ends with it and nobody waits for it.
func TestLastStatus(t *testing.T) {
	exitAndClean := func(s *Supervisor, a *App, ws unix.WaitStatus) {
		s.Exit(a, ws, s.os.Now())
	}
	t.Run("immutable pod: the last app to finish", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, false, appCfg("a", podplan.RestartNever), appCfg("b", podplan.RestartNever))
		s.StartAll(func() bool { return false })
		a, b := s.apps[0], s.apps[1]
		exitAndClean(s, a, exit0)
		if _, ok := f.last["a"]; !ok || f.last["a"] {
			t.Fatalf("first app's status: written %v, last %v; want written, not last", ok, f.last["a"])
		}
		exitAndClean(s, b, exit0)
		if !f.last["b"] || !s.Over() {
			t.Fatalf("last app's status: last %v, pod over %v", f.last["b"], s.Over())
		}
	})
	t.Run("mutable pod: an app finishing while the pod stays", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, true, appCfg("a", podplan.RestartNever))
		a := s.apps[0]
		s.Fire(a, Start, nil)
		exitAndClean(s, a, exit1)
		if _, ok := f.last["a"]; !ok || f.last["a"] {
			t.Fatalf("written %v, last %v; want written, not last", ok, f.last["a"])
		}
	})
	t.Run("pod stop: every app finishing in it", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, false, appCfg("a", podplan.RestartAlways), appCfg("b", podplan.RestartAlways))
		s.StartAll(func() bool { return false })
		s.StopPod("test", false)
		exitAndClean(s, s.apps[0], sigterm)
		exitAndClean(s, s.apps[1], sigterm)
		if !f.last["a"] || !f.last["b"] {
			t.Fatalf("last %v; want both", f.last)
		}
	})
	t.Run("app stop answered: its caller may read the status", func(t *testing.T) {
		f := newFakeOS(t)
		s := newPod(f, true, appCfg("a", podplan.RestartNever))
		a := s.apps[0]
		s.Fire(a, Start, nil)
		answered := false
		s.StopApp("a", false, func(error) { answered = true })
		s.StopPod("test", false)
		exitAndClean(s, a, sigterm)
		if !answered || f.last["a"] {
			t.Fatalf("answered %v, last %v; want answered, not last", answered, f.last["a"])
		}
	})
}

// The order of an app's final record and status: the record first (one
// durable status write then makes both durable), but for one of the pod's
// last statuses the status first, since its commit, on the way to the
// lock's release, starts with it.
func TestFinalRecordAndStatusOrder(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, appCfg("a", podplan.RestartNever), appCfg("b", podplan.RestartNever))
	s.StartAll(func() bool { return false })
	a, b := s.apps[0], s.apps[1]
	order := func(app string) []string {
		var got []string
		for _, c := range f.calls {
			if strings.HasPrefix(c, "record "+app+" "+status.StateExited) || strings.HasPrefix(c, "status "+app+" ") {
				got = append(got, strings.Fields(c)[0])
			}
		}
		return got
	}
	s.Exit(a, exit0, f.now)
	if got := order("a"); !slices.Equal(got, []string{"record", "status"}) || f.last["a"] {
		t.Errorf("an app ending while the pod goes on: %q (last %v), want the record, then the status", got, f.last["a"])
	}
	s.Exit(b, exit0, f.now)
	if got := order("b"); !slices.Equal(got, []string{"status", "record"}) || !f.last["b"] {
		t.Errorf("the pod's last app: %q (last %v), want the status, then the record", got, f.last["b"])
	}
}
