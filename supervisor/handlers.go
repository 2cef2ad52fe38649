package supervisor

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/status"
)

// Phase is which of an app's processes its run is at. An app with appc
// eventHandlers runs them as rkt's stage1 does (systemd's ExecStartPre=
// and ExecStopPost=): the pre-start handler before the app's process, in
// the same cgroup, and the app runs only if it succeeds; the post-stop
// handler once the app's run is over and its cgroup emptied, whatever the
// run's end. The handlers' processes are the app's as far as the table is
// concerned (Running, Stopping, Killing); the phase says which one runs.
type Phase int

// The phases of a run.
const (
	PhaseMain     Phase = iota // the app's own process
	PhasePreStart              // the pre-start handler
	PhasePostStop              // the post-stop handler
)

var phaseNames = [...]string{"app", "pre-start handler", "post-stop handler"}

func (p Phase) String() string { return phaseNames[p] }

// Phase is the phase of the app's current (or last) process.
func (a *App) Phase() Phase { return a.phase }

// firstPhase is where a new run begins.
func firstPhase(a *App) Phase {
	if len(a.Cfg.PreStart) > 0 {
		return PhasePreStart
	}
	return PhaseMain
}

// handlerEnded takes the end of a handler's process, and reports whether
// it did: a pre-start handler that succeeded starts the app's process
// (still Running); one that failed, or was stopped, ends the run with its
// code, the app's process never started (ended goes on). The end of the
// post-stop handler is logged if it failed, and the app's cgroup emptied
// again, the run's code kept.
func (s *Supervisor) handlerEnded(a *App, ws unix.WaitStatus, t time.Time) bool {
	code := status.FromWaitStatus(ws)
	switch a.phase {
	case PhasePreStart:
		if code == 0 && a.fate == fateRestart && !s.stopping {
			a.phase = PhaseMain
			if err := s.spawn(a); err == nil {
				return true
			} else {
				s.os.Logf(Warning, "app %q: start: %v", a.Name, err)
			}
			s.record(a, status.CodeStage1Failure, 0, t)
			a.Rec.LastFailure = status.ReasonSetup
			s.clean(a)
			return true
		}
		if code != 0 {
			s.os.Logf(Warning, "app %q: pre-start handler failed with %d: the app does not run", a.Name, code)
		}
		return false
	case PhasePostStop:
		if code != 0 {
			s.os.Logf(Warning, "app %q: post-stop handler failed with %d", a.Name, code)
		}
		a.Pid, a.Rec.Pid, a.Rec.PodPid = 0, 0, 0
		s.clean(a)
		return true
	}
	return false
}

// postStop starts the post-stop handler of a run that is over, once, and
// reports whether it did: Running, or Stopping (no signal yet, SIGKILL at
// the end of the app's grace period) when the app or the pod is being
// stopped, so that a stop is never held longer than a stop takes; Starting
// while its set-up process hands it over (then as here).
func (s *Supervisor) postStop(a *App) bool {
	if len(a.Cfg.PostStop) == 0 || a.phase == PhasePostStop || s.final {
		return false
	}
	a.phase = PhasePostStop
	if err := s.spawn(a); err != nil {
		s.os.Logf(Warning, "app %q: post-stop handler: %v", a.Name, err)
		return false
	}
	if a.state == Running {
		s.running(a)
	}
	return true
}

// spawn starts the process of the run's current phase after the first
// (Running, or Starting): no new start for the start limit, the run's
// record kept but for the pids.
func (s *Supervisor) spawn(a *App) error {
	p, err := s.os.Start(a)
	if err != nil {
		return err
	}
	s.begin(a, p)
	s.write(a)
	s.os.Debugf("app %q: %v started as pid %d (host pid %d)%s", a.Name, a.phase, p.Pid, p.HostPid, handOverNote(p))
	s.os.Started(a)
	return nil
}
