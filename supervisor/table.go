package supervisor

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/status"
)

// Worked example, the question a newcomer asks first: what happens when
// an app exits while it is being stopped? app/stop of a Running app is
// Running x Stop: SIGTERM, the kill deadline armed (Stopping), the caller
// waiting. Its process then exits: Stopping x Exit (exitedStopping,
// below): the end is recorded (143 if the SIGTERM killed it) and the app
// is Cleaning, the kill deadline gone with Stopping. Once its cgroup is
// empty, Cleaning x CgroupEmpty: no restart (the stop made its fate
// final), so it is finished (Exited, status written) and app/stop is
// answered. Had the grace period run out first, Stopping x KillDeadline
// (SIGKILL, Killing), then Killing x Exit, to the same end with 137.
//
// The life of an app, whole: for every state, what every event does. Each
// cell says in words what happens and which states it may lead to; every
// pair is written out, the impossible ones too (logged as a bug if they
// ever happen, and otherwise changing nothing), so that nothing is left
// to a default. TestEveryTransition fires every cell.
//
// States (supervisor.go): Removed (not in the pod), Idle, Starting (a set-up
// process prepares it in a user namespace, report deadline armed), Running,
// Stopping (SIGTERM sent, kill deadline armed), Killing (SIGKILL sent),
// Cleaning (the process ended, its cgroup is being emptied, clean
// deadline armed), Backoff (restart timer armed), Exited (finished for
// good, status written).
//
// Timers belong to states: a state with a deadline has exactly one
// (Starting: ReportDeadline; Stopping: KillDeadline; Cleaning:
// CleanDeadline; Backoff: RestartTimer), and leaving the state disarms it.
//
// Who is "finished": an app enters Exited through finish, which writes the
// record, then the status file rkt reads, answers whoever waited for the
// app (app/stop, app/rm), removes the app if app/rm asked (Removed), and
// applies the pod's exit policy (which may stop the pod, firing PodStop at
// every app).
var table [numStates][numEvents]cell

// The table is filled in by init: its actions refer back to it (Fire).
func init() { table = theTable() }

func theTable() [numStates][numEvents]cell {
	return [numStates][numEvents]cell{
		Removed: {
			Add: {to: of(Idle, Removed), doc: "its spec is saved (if that fails, the add fails: Removed), then the app enters the pod (its old status, if the name was used before, is removed)",
				do: func(s *Supervisor, a *App, in *Input) {
					if in.Save != nil {
						if in.Err = in.Save(); in.Err != nil {
							return
						}
					}
					s.os.ClearStatus(a.Name)
					a.state = Idle
					s.write(a)
					s.apps = append(s.apps, a)
					s.os.Debugf("app %q: added", a.Name)
				}},
			Start:          refused("no app of that name in the pod", errNoApp),
			Reported:       ignored("a report for a run of an app removed since: its cgroup went with it"),
			ReportDeadline: never("a removed app has no timer"),
			Exit:           never("a removed app has no process"),
			CgroupEmpty:    never("a removed app is not being cleaned"),
			CleanDeadline:  never("a removed app is not being cleaned"),
			RestartTimer:   never("a removed app has no timer"),
			Stop:           notRunning,
			ForceStop:      notRunning,
			KillDeadline:   never("a removed app has no timer"),
			Rm:             answered("already gone: a retried rm"),
			PodStop:        ignored("nothing to stop"),
			PodForceStop:   ignored("nothing to stop"),
		},
		Idle: {
			Add: refused("the name is taken", errTaken),
			Start: {to: of(Starting, Running, Exited), doc: "a run starts (Starting while the set-up process of an app in a user namespace hands it over); if it cannot (or the pod is already stopping), the app is finished with 254 (app/start: it fails and the app is left exited)",
				do: startAnew},
			Reported:       never("an idle app has no run"),
			ReportDeadline: never("an idle app has no timer"),
			Exit:           never("an idle app has no process"),
			CgroupEmpty:    never("an idle app is not being cleaned"),
			CleanDeadline:  never("an idle app is not being cleaned"),
			RestartTimer:   never("an idle app has no timer"),
			Stop:           notRunning,
			ForceStop:      notRunning,
			KillDeadline:   never("an idle app has no timer"),
			Rm:             removeNow,
			PodStop:        ignored("it never ran; the pod's end does not wait for it"),
			PodForceStop:   ignored("it never ran; the pod's end does not wait for it"),
		},
		Starting: {
			Add:      refused("the name is taken", errTaken),
			Start:    refused("it is starting", errRunning),
			Reported: reported,
			ReportDeadline: {to: of(Killing, Cleaning, Backoff, Exited, Starting), doc: "the set-up did not report in time: one that used the CPU since the last look waits on (Starting), up to ReportLimit; else (a mount on a hung file system) logged, and its set-up process and cgroup are killed (Killing: its end, 137, is the run's, and its restart policy decides); if it had already ended, its end is the run's (as Reported with no process)",
				do: func(s *Supervisor, a *App, in *Input) {
					if s.setupBusy(a) {
						return
					}
					if a.stopAsked {
						s.os.Logf(Info, "app %q: stopped while it started, its grace period is over: killing it", a.Name)
					} else {
						why := fmt.Sprintf("used no CPU for %v", ReportTimeout)
						if !s.os.Now().Before(a.setupLimit) {
							why = fmt.Sprintf("has been busy for %v", ReportLimit)
						}
						s.os.Logf(Warning, "app %q: its set-up has not reported the app's process and %s: killing it", a.Name, why)
					}
					a.awaiting = false
					if a.setupEnded {
						s.ended(a, a.setupStatus, a.setupTime)
						return
					}
					s.kill(a)
				}},
			Exit: {doc: "its set-up process ended: its report, written before it ended (or the EOF that says there is none), is read next; its end is kept for the run if no process is reported",
				do: func(s *Supervisor, a *App, in *Input) {
					a.Pid, a.setupEnded, a.setupStatus, a.setupTime = 0, true, in.Status, in.Time
				}},
			CgroupEmpty:   never("a starting app is not being cleaned"),
			CleanDeadline: never("a starting app is not being cleaned"),
			RestartTimer:  never("a starting app has no restart timer"),
			Stop: {to: of(Killing), doc: "nothing of the app has been told to run yet: its set-up is killed with its cgroup (Killing), no grace period; it will not restart; answered when finished",
				do: func(s *Supervisor, a *App, in *Input) { a.fate = fateStop; a.wait(in); s.kill(a) }},
			ForceStop: {to: of(Killing), doc: "as stop",
				do: func(s *Supervisor, a *App, in *Input) { a.fate = fateStop; a.wait(in); s.kill(a) }},
			KillDeadline: never("a starting app has no kill deadline"),
			Rm: {to: of(Killing), doc: "its set-up is killed with its cgroup (Killing); removed when finished, answered then",
				do: func(s *Supervisor, a *App, in *Input) {
					a.fate = fateRemove
					s.write(a)
					a.wait(in)
					s.kill(a)
				}},
			PodStop: {to: of(Starting), doc: "it will not restart; SIGTERM to its cgroup (the app's process may run already: its set-up clones it, then reports), and its deadline becomes the grace period's: reported, it is stopped as a running app is; not reported by then, killed",
				do: func(s *Supervisor, a *App, in *Input) {
					a.stopOnly()
					if !a.stopAsked {
						a.stopAsked = true
						s.os.Signal(a, unix.SIGTERM)
						if d := s.os.Now().Add(a.Cfg.Supervision.Grace); d.Before(a.deadline) {
							a.deadline = d
						}
					}
				}},
			PodForceStop: {to: of(Killing), doc: "as pod-stop",
				do: func(s *Supervisor, a *App, in *Input) { a.stopOnly(); s.kill(a) }},
		},
		Running: {
			Add:            refused("the name is taken", errTaken),
			Start:          refused("it is running", errRunning),
			Reported:       never("its process is known: a set-up process reports once"),
			ReportDeadline: never("a running app has no report deadline"),
			Exit:           exitedRunning,
			CgroupEmpty:    never("a running app is not being cleaned"),
			CleanDeadline:  never("a running app is not being cleaned"),
			RestartTimer:   never("a running app has no restart timer"),
			Stop: {to: of(Stopping), doc: "SIGTERM to its process and cgroup, the kill deadline armed; it will not restart; answered when finished",
				do: func(s *Supervisor, a *App, in *Input) { a.fate = fateStop; a.wait(in); s.term(a) }},
			ForceStop: {to: of(Killing), doc: "SIGKILL; it will not restart; answered when finished",
				do: func(s *Supervisor, a *App, in *Input) { a.fate = fateStop; a.wait(in); s.kill(a) }},
			KillDeadline: never("a running app has no kill deadline"),
			Rm:           killToRemove,
			PodStop: {to: of(Stopping), doc: "SIGTERM, the kill deadline armed; it will not restart",
				do: func(s *Supervisor, a *App, in *Input) { a.stopOnly(); s.term(a) }},
			PodForceStop: {to: of(Killing), doc: "SIGKILL; it will not restart",
				do: func(s *Supervisor, a *App, in *Input) { a.stopOnly(); s.kill(a) }},
		},
		Stopping: {
			Add:            refused("the name is taken", errTaken),
			Start:          refused("it is running", errRunning),
			Reported:       never("its process is known: a set-up process reports once"),
			ReportDeadline: never("a stopping app has no report deadline"),
			Exit:           exitedStopping,
			CgroupEmpty:    never("a stopping app is not being cleaned"),
			CleanDeadline:  never("a stopping app is not being cleaned"),
			RestartTimer:   never("a stopping app has no restart timer"),
			Stop:           waitFinish("already stopping: answered when finished, no restart"),
			ForceStop: {to: of(Killing), doc: "SIGKILL now; it will not restart; answered when finished",
				do: func(s *Supervisor, a *App, in *Input) { a.stopOnly(); a.wait(in); s.kill(a) }},
			KillDeadline: {to: of(Killing), doc: "the grace period is over: SIGKILL",
				do: func(s *Supervisor, a *App, in *Input) {
					s.os.Logf(Info, "app %q: grace period of %v over, killing it", a.Name, a.Cfg.Supervision.Grace)
					a.stopOnly()
					s.kill(a)
				}},
			Rm:      killToRemove,
			PodStop: ignored("already stopping"),
			PodForceStop: {to: of(Killing), doc: "SIGKILL now",
				do: func(s *Supervisor, a *App, in *Input) { a.stopOnly(); s.kill(a) }},
		},
		Killing: {
			Add:            refused("the name is taken", errTaken),
			Start:          refused("it is running", errRunning),
			Reported:       killedReport,
			ReportDeadline: never("the report deadline is disarmed once SIGKILL is sent"),
			Exit:           exitedKilling,
			CgroupEmpty:    never("a killed app is not being cleaned before it exits"),
			CleanDeadline:  never("a killed app is not being cleaned before it exits"),
			RestartTimer:   never("a killed app has no restart timer"),
			Stop:           waitFinish("already killed: answered when finished, no restart"),
			ForceStop:      waitFinish("already killed: answered when finished, no restart"),
			KillDeadline:   never("the kill deadline is disarmed once SIGKILL is sent"),
			Rm: {to: of(Killing), doc: "already killed: removed when finished, answered then",
				do: func(s *Supervisor, a *App, in *Input) { a.fate = fateRemove; s.write(a); a.wait(in) }},
			PodStop:      ignored("already killed"),
			PodForceStop: ignored("already killed"),
		},
		Cleaning: {
			Add:            refused("the name is taken", errTaken),
			Start:          refused("its last run is still being cleaned up", errRunning),
			Reported:       lateReport,
			ReportDeadline: never("a cleaning app has no report deadline"),
			Exit:           never("its process already ended"),
			CgroupEmpty: {to: of(Running, Stopping, Starting, Backoff, Exited, Removed), doc: "its cgroup is found empty (an OOM kill in it recorded; the cgroup is removed once the app's status is written, or before its next run); then its post-stop handler runs if it has one and it has not run yet (Running; Stopping, its deadline the grace period, if it or the pod is being stopped; Starting first in a user namespace); else it restarts after its backoff if its policy says so and nobody asked it or the pod to stop, else it is finished with its code",
				do: func(s *Supervisor, a *App, in *Input) {
					if s.os.Release(a) {
						a.Rec.LastFailure = status.ReasonOOM
					}
					s.settle(a)
				}},
			CleanDeadline: {to: of(Running, Stopping, Starting, Backoff, Exited, Removed), doc: "processes it left could not be killed in time: logged, its cgroup kept, then as cgroup-empty",
				do: func(s *Supervisor, a *App, in *Input) {
					s.os.Logf(Warning, "app %q: processes left in its cgroup after %v", a.Name, CleanTimeout)
					s.settle(a)
				}},
			RestartTimer: never("a cleaning app has no restart timer"),
			Stop:         waitFinish("its process already ended: it will not restart; answered when finished"),
			ForceStop:    waitFinish("its process already ended: it will not restart; answered when finished"),
			KillDeadline: never("a cleaning app has no kill deadline"),
			Rm: {to: of(Cleaning), doc: "its process already ended: removed when finished, answered then",
				do: func(s *Supervisor, a *App, in *Input) { a.fate = fateRemove; s.write(a); a.wait(in) }},
			PodStop:      waitFinish("it will not restart: finished once clean"),
			PodForceStop: waitFinish("it will not restart: finished once clean"),
		},
		Backoff: {
			Add:            refused("the name is taken", errTaken),
			Start:          refused("it is waiting to restart", errRunning),
			Reported:       lateReport,
			ReportDeadline: never("a restarting app has no report deadline"),
			Exit:           never("a restarting app has no process"),
			CgroupEmpty:    never("a restarting app is not being cleaned"),
			CleanDeadline:  never("a restarting app is not being cleaned"),
			RestartTimer: {to: of(Starting, Running, Exited), doc: "it starts again (restartCount + 1; Starting in a user namespace); if it cannot, it is finished with 254",
				do: func(s *Supervisor, a *App, in *Input) { a.Rec.RestartCount++; s.runOrFail(a) }},
			Stop:         finishLast("finished with its last code, answered at once"),
			ForceStop:    finishLast("finished with its last code, answered at once"),
			KillDeadline: never("a restarting app has no kill deadline"),
			Rm: {to: of(Removed), doc: "finished with its last code, removed, answered",
				do: func(s *Supervisor, a *App, in *Input) {
					a.fate = fateRemove
					a.wait(in)
					s.finish(a, a.code)
				}},
			PodStop:      finishLast("finished with its last code"),
			PodForceStop: finishLast("finished with its last code"),
		},
		Exited: {
			Add:            refused("the name is taken", errTaken),
			Start:          {to: of(Starting, Running, Exited), doc: "app/start: a new life (status, record, counters and start limit start over); if it cannot start, it fails and the app is left exited", do: startAnew},
			Reported:       lateReport,
			ReportDeadline: never("a finished app has no timer"),
			Exit:           never("a finished app has no process"),
			CgroupEmpty:    never("a finished app is not being cleaned"),
			CleanDeadline:  never("a finished app is not being cleaned"),
			RestartTimer:   never("a finished app has no timer"),
			Stop:           notRunning,
			ForceStop:      notRunning,
			KillDeadline:   never("a finished app has no timer"),
			Rm:             removeNow,
			PodStop:        ignored("already finished"),
			PodForceStop:   ignored("already finished"),
		},
	}
}

// A cell is what one event does to an app in one state.
type cell struct {
	// to are the states it may leave the app in; none: it stays.
	to []State
	// doc says what happens, in words.
	doc string
	// impossible marks a pair that cannot happen; Fire logs it.
	impossible bool
	do         func(s *Supervisor, a *App, in *Input)
}

func of(s ...State) []State { return s }

// The end of the app's process. In every case its end is recorded (code,
// signal, failure reason), what it left in its cgroup is killed, and the
// app waits in Cleaning for the cgroup to empty (over at once when it is
// empty); then cgroup-empty decides. In a user namespace each process a
// run starts (the app's after a pre-start handler, a post-stop handler)
// begins as a set-up process: Starting where the cells say Running or
// Stopping.
var (
	exitedRunning = cell{to: of(Running, Starting, Cleaning, Backoff, Exited),
		doc: "the end of a pre-start handler that succeeded starts the app's own process (Running, or Starting); any other end: Cleaning (a post-stop handler's end keeps the run's code); then it restarts after its backoff (Backoff) if its policy says so and its start limit allows, else it is finished with its code (Exited); a post-stop handler may run first (Running)",
		do:  func(s *Supervisor, a *App, in *Input) { s.ended(a, in.Status, in.Time) }}
	exitedStopping = cell{to: of(Cleaning, Stopping, Starting, Exited),
		doc: "the stop's end: Cleaning (then its post-stop handler, if any, runs: Stopping); then it is finished with the code it ended with (143 if the SIGTERM killed it), never restarted, and whoever asked for the stop (app/stop) is answered",
		do:  func(s *Supervisor, a *App, in *Input) { s.ended(a, in.Status, in.Time) }}
	exitedKilling = cell{to: of(Cleaning, Stopping, Starting, Backoff, Exited, Removed),
		doc: "the kill's end: Cleaning (then its post-stop handler, if any, runs: Stopping); then it is finished with its code (137), never restarted if a stop or rm killed it (one killed at its report deadline is a failed run: its policy may restart it, Backoff), removed if app/rm asked (Removed), and whoever waited is answered",
		do:  func(s *Supervisor, a *App, in *Input) { s.ended(a, in.Status, in.Time) }}
)

// reported: the report of a Starting app's set-up process.
var reported = cell{to: of(Running, Stopping, Starting, Cleaning, Backoff, Exited),
	doc: "the reported process is the app's (Running; Stopping, SIGTERM sent, if the pod is being stopped, and for a post-stop handler of an app being stopped); with none reported, the set-up failed: its end, if it came, is the run's (Cleaning, then as any end), else the set-up process stands for the app until it ends (Running)",
	do: func(s *Supervisor, a *App, in *Input) {
		a.awaiting = false
		switch {
		case in.Pid > 0:
			s.adopt(a, in.Pid)
		case a.setupEnded:
			s.ended(a, a.setupStatus, a.setupTime)
			return
		}
		s.running(a)
		if s.stopping && a.state == Running {
			// The pod's stop came while it was starting.
			a.stopOnly()
			s.term(a)
		}
		s.write(a)
	}}

// killedReport: the report of a set-up process killed before it reported
// (a stop, the report deadline).
var killedReport = cell{to: of(Killing, Cleaning, Starting, Exited, Removed),
	doc: "a set-up killed before it reported: the reported process is adopted and killed, its end the run's; with none reported, the set-up's end is the run's, now if it came (Cleaning, then as any end), else when it comes; a report not awaited (the app was never Starting) is ignored",
	do: func(s *Supervisor, a *App, in *Input) {
		if !a.awaiting {
			return
		}
		a.awaiting = false
		switch {
		case in.Pid > 0:
			s.adopt(a, in.Pid)
			s.os.Kill(a)
		case a.setupEnded && a.Pid == 0:
			s.ended(a, a.setupStatus, a.setupTime)
		}
	}}

// lateReport: the report of a run that is over.
var lateReport = cell{doc: "the run it reports on is over: the reported process, if any, is not adopted; it is in the app's cgroup, which was emptied with the run (its end is an orphan's)",
	do: func(s *Supervisor, a *App, in *Input) { a.awaiting = false }}

// startAnew: Start of an app with no run (Idle, Exited).
func startAnew(s *Supervisor, a *App, in *Input) {
	if !in.Op {
		// The pod's start: a stop asked meanwhile wins.
		if s.stopping {
			s.finish(a, status.CodeStage1Failure)
			return
		}
		s.runOrFail(a)
		return
	}
	// app/start: stage0 removed the old status before asking; a start
	// is a new life.
	s.os.ClearStatus(a.Name)
	a.starts, a.backoff, a.Rec, a.fate = nil, a.Cfg.Supervision.Backoff, status.Record{}, fateRestart
	if err := s.run(a); err != nil {
		a.state = Exited
		a.Rec.LastFailure = status.ReasonSetup
		s.write(a)
		in.Err = err
	}
}

// killToRemove: app/rm of a running app: SIGKILL (stage0 has already
// asked for a graceful stop), removed once finished.
var killToRemove = cell{to: of(Killing), doc: "SIGKILL at once (stage0 already asked for a graceful stop); removed when finished, answered then",
	do: func(s *Supervisor, a *App, in *Input) {
		a.fate = fateRemove
		s.write(a)
		a.wait(in)
		s.kill(a)
	}}

// removeNow: app/rm of an app with no run.
var removeNow = cell{to: of(Removed), doc: "removed at once (record, spec, cgroup), answered",
	do: func(s *Supervisor, a *App, in *Input) {
		a.fate = fateRemove
		s.write(a)
		s.remove(a)
		if in.Reply != nil {
			in.Reply(nil)
		}
	}}

var notRunning = cell{doc: "answered at once: not running (done, as systemctl stop of an inactive unit is)",
	do: func(s *Supervisor, a *App, in *Input) {
		if in.Reply != nil {
			in.Reply(ErrNotRunning)
		}
	}}

// waitFinish: a stop of an app already on its way out.
func waitFinish(doc string) cell {
	return cell{doc: doc, do: func(s *Supervisor, a *App, in *Input) { a.stopOnly(); a.wait(in) }}
}

// finishLast: a restarting app asked to stop is finished with the code of
// its last run.
func finishLast(doc string) cell {
	return cell{to: of(Exited), doc: doc, do: func(s *Supervisor, a *App, in *Input) {
		a.stopOnly()
		a.wait(in)
		s.finish(a, a.code)
	}}
}

func answered(doc string) cell {
	return cell{doc: doc, do: func(s *Supervisor, a *App, in *Input) {
		if in.Reply != nil {
			in.Reply(nil)
		}
	}}
}

func ignored(doc string) cell {
	return cell{doc: doc, do: func(*Supervisor, *App, *Input) {}}
}

func never(doc string) cell {
	return cell{doc: doc, impossible: true, do: func(*Supervisor, *App, *Input) {}}
}

func refused(doc string, err func(a *App) error) cell {
	return cell{doc: doc, do: func(s *Supervisor, a *App, in *Input) { in.Err = err(a) }}
}

func errNoApp(a *App) error   { return fmt.Errorf("no app named %q in the pod", a.Name) }
func errTaken(a *App) error   { return fmt.Errorf("an app named %q is already in the pod", a.Name) }
func errRunning(a *App) error { return fmt.Errorf("app %q is already running", a.Name) }

// stopOnly makes the end of the current run final, unless it is already
// to be removed.
func (a *App) stopOnly() {
	if a.fate == fateRestart {
		a.fate = fateStop
	}
}
