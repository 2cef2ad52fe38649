package main

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/podattach"
	"github.com/pod1/pod1/podlog"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/sigpolicy"
	"github.com/pod1/pod1/status"
)

// appState is where an app is in its life.
type appState int

const (
	stateNew        appState = iota
	stateRunning             // its process exists
	stateRestarting          // waiting out its backoff
	stateDone                // finished for good: status written
)

// app is the supervisor's record of one app.
type app struct {
	cfg   *podspec.App
	name  string
	cg    *cgroups.Group
	state appState
	pid   int
	// starts are the recent start times, for the start limit.
	starts    []time.Time
	backoff   time.Duration
	nextStart time.Time
	// killAt is when a stopping app gets SIGKILL (zero: not stopping).
	killAt time.Time
	rec    status.Record
	// noRestart is set when the app alone was asked to stop.
	noRestart bool
	// removing is set by app/rm: the app leaves the pod once finished.
	removing bool
	// waiters are app operations answered when the app is finished.
	waiters []*control.Call
}

var timeNow = time.Now

// supervisor runs the apps of one pod. By default it has rkt's semantics:
// the pod ends when every app has finished; the first app to finish with a
// failure stops the others and its code becomes the pod's. Restart
// policies and the pod's exit policy refine that (docs/supervision.md).
type supervisor struct {
	pod      *podspec.Pod
	dir      *status.Dir
	reaper   *reaper.Reaper
	apps     []*app
	stopping bool
	podCode  int
	// pending holds exits collected while waiting for a cgroup to empty,
	// handled by the next turn of the loop.
	pending []reaper.Exit
	// spare is the app process started ahead of the configuration for
	// the first app to take (spare.go).
	spare *spare
	// calls are app operations (mutable pods only; nil otherwise).
	calls chan *control.Call
	// req is the stop asked of PID 1 (signals, the death of run).
	req *sigpolicy.Requests
	// logs carries the apps' output; devNull is the stdio of streams
	// that get none.
	logs    *podlog.Forwarder
	devNull int
	// attach serves the apps' stdio to rkt attach (podattach).
	attach *podattach.Hub
}

func newSupervisor(pod *podspec.Pod, dir *status.Dir, r *reaper.Reaper) *supervisor {
	s := &supervisor{pod: pod, dir: dir, reaper: r}
	for i := range pod.Apps {
		a := &app{cfg: &pod.Apps[i], name: pod.Apps[i].Spec.App}
		a.backoff = a.cfg.Supervision.Backoff
		s.apps = append(s.apps, a)
	}
	return s
}

func (s *supervisor) startAll() {
	for _, a := range s.apps {
		// A stop asked while the apps start is acted on before the
		// next one starts, not after all of them.
		s.actOnRequest()
		if s.stopping {
			s.finish(a, status.CodeStage1Failure)
			continue
		}
		s.startOrFail(a)
	}
}

func (s *supervisor) startOrFail(a *app) {
	if err := s.start(a); err != nil {
		// The app never ran: it gets the stage1 failure code, and the
		// pod policy applies as for any other end.
		s.logf("app %q: start: %v", a.name, err)
		a.rec.LastFailure = status.ReasonSetup
		s.finish(a, status.CodeStage1Failure)
	}
}

// onExit handles the end of an app's process: what it left behind is
// killed first, then the app restarts or is finished for good.
func (s *supervisor) onExit(e reaper.Exit) {
	a := e.Tag.(*app)
	code := status.FromWaitStatus(e.Status)
	s.debugf("app %q: pid %d ended: status %#x, code %d", a.name, e.Pid, uint32(e.Status), code)
	a.pid, a.killAt = 0, time.Time{}
	s.attach.End(a.name)
	t := e.Time
	a.rec.ExitCode, a.rec.FinishedAt, a.rec.Signal, a.rec.Pid, a.rec.PodPid = &code, &t, "", 0, 0
	if e.Status.Signaled() {
		a.rec.Signal = unix.SignalName(e.Status.Signal())
	}
	if r := failureReason(e.Status, code); r != "" {
		a.rec.LastFailure = r
	}
	s.cleanCgroup(a)
	if s.restart(a, code, e.Time) {
		return
	}
	s.finish(a, code)
}

// restart decides whether the app runs again and, if so, schedules it.
func (s *supervisor) restart(a *app, code int, ended time.Time) bool {
	sup := &a.cfg.Supervision
	if s.stopping || a.noRestart || sup.Restart == podspec.RestartNever || sup.Restart == podspec.RestartOnFailure && code == 0 {
		return false
	}
	// A run that lasted as long as the longest backoff resets it: the
	// app is not crash-looping.
	if len(a.starts) > 0 && ended.Sub(a.starts[len(a.starts)-1]) >= sup.BackoffMax {
		a.backoff = sup.Backoff
	}
	next := ended.Add(a.backoff)
	recent := 0
	for _, t := range a.starts {
		if next.Sub(t) < sup.Interval {
			recent++
		}
	}
	if recent >= sup.Burst {
		s.logf("app %q: start limit hit (%d starts within %v), failed for good", a.name, sup.Burst, sup.Interval)
		return false
	}
	a.state, a.nextStart = stateRestarting, next
	a.backoff = min(a.backoff*2, sup.BackoffMax)
	a.rec.State = status.StateRestarting
	s.writeRecord(a)
	s.debugf("app %q: restarting in %v", a.name, next.Sub(ended))
	return true
}

// finish marks the app finished for good: the plain status file (the one
// rkt reads) is written now and only now, then the pod's exit policy
// applies.
func (s *supervisor) finish(a *app, code int) {
	a.state = stateDone
	if a.rec.ExitCode == nil {
		a.rec.ExitCode = &code
	}
	a.rec.State = status.StateExited
	if a.removing {
		a.rec.State = status.StateRemoving
	}
	// The record first: the status's durable write (fsync of the file
	// and of the directory) then makes both durable at once.
	s.writeRecord(a)
	if err := s.dir.Write(a.name, code); err != nil {
		s.logf("app %q: write status %d: %v", a.name, code, err)
	}
	s.answer(a)
	// In a mutable pod apps come and go; only a stop ends the pod.
	if s.stopping || s.pod.Mutable {
		return
	}
	switch s.pod.ExitPolicy {
	case podspec.ExitAnyApp:
		s.podCode = code
		s.stop(fmt.Sprintf("app %q finished with %d", a.name, code), false)
	case podspec.ExitMainApp:
		if a.name == s.pod.MainApp {
			s.podCode = code
			s.stop(fmt.Sprintf("main app %q finished with %d", a.name, code), false)
		}
	default:
		if code != 0 {
			s.podCode = code
			s.stop(fmt.Sprintf("app %q failed with %d", a.name, code), false)
		}
	}
}

// stop asks every running app to end: SIGTERM to everything in its cgroup,
// in reverse start order, and SIGKILL when its grace period is over (at
// once when forced). Apps waiting to restart are finished with their last
// code.
func (s *supervisor) stop(why string, force bool) {
	if !s.stopping {
		s.debugf("stopping the pod: %s", why)
	}
	s.stopping = true
	now := time.Now()
	for i := len(s.apps) - 1; i >= 0; i-- {
		a := s.apps[i]
		switch a.state {
		case stateRestarting:
			s.finish(a, *a.rec.ExitCode)
		case stateRunning:
			if force {
				s.killApp(a)
				continue
			}
			if !a.killAt.IsZero() {
				continue
			}
			a.killAt = now.Add(a.cfg.Supervision.Grace)
			s.signalApp(a, unix.SIGTERM)
		}
	}
}

// actOnRequest carries out the stop asked so far, if any: repeating one is
// harmless (stop only escalates), so it is called whenever asked may have
// changed.
func (s *supervisor) actOnRequest() {
	if s.req == nil {
		return
	}
	switch s.req.Level() {
	case sigpolicy.Stop:
		s.stop(s.req.Why(), false)
	case sigpolicy.ForceStop:
		s.stop(s.req.Why()+": forced stop", true)
	}
}

func (s *supervisor) signalApp(a *app, sig unix.Signal) {
	// The pid covers an app still setting up, before it is anything
	// but a member of its cgroup.
	_ = unix.Kill(a.pid, sig)
	if a.cg != nil {
		a.cg.Signal(sig)
	} else {
		_ = unix.Kill(-a.pid, sig)
	}
}

func (s *supervisor) killApp(a *app) {
	a.killAt = time.Time{}
	// The pid as well as the cgroup: an app whose move into its cgroup
	// failed is not in it, and one still setting up is killed either way.
	_ = unix.Kill(a.pid, unix.SIGKILL)
	if a.cg != nil {
		if err := a.cg.Kill(); err == nil {
			return
		}
	}
	_ = unix.Kill(-a.pid, unix.SIGKILL)
}

// tick carries out what is due: restarts whose backoff is over, SIGKILLs
// whose grace period is. It returns when it next has something to do.
func (s *supervisor) tick(now time.Time) time.Time {
	var next time.Time
	due := func(t time.Time) bool {
		if t.IsZero() {
			return false
		}
		if !t.After(now) {
			return true
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
		return false
	}
	for _, a := range s.apps {
		switch a.state {
		case stateRestarting:
			if due(a.nextStart) {
				a.rec.RestartCount++
				s.startOrFail(a)
			}
		case stateRunning:
			if due(a.killAt) {
				s.logf("app %q: grace period of %v over, killing it", a.name, a.cfg.Supervision.Grace)
				s.killApp(a)
			}
		}
	}
	return next
}

func (s *supervisor) finished() bool {
	for _, a := range s.apps {
		if a.state != stateDone && a.state != stateNew {
			return false
		}
	}
	return !s.pod.Mutable || s.stopping
}
