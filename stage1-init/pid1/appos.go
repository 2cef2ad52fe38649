package pid1

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/console"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podattach"
	"github.com/pod1/pod1/podlog"
	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/status"
	"github.com/pod1/pod1/supervisor"
)

// appOS is the system as PID 1's supervisor (package supervisor) sees it:
// the apps' processes, their cgroups, their status files, the clock. The
// supervisor decides; appOS carries out, and never waits.
type appOS struct {
	pod    *podplan.Pod
	dir    *status.Dir
	reaper *reaper.Reaper
	// logs carries the apps' output; devNull is the stdio of streams
	// that get none.
	logs    *podlog.Forwarder
	devNull int
	// spare is the app process started ahead of the configuration for
	// the first app to take (spare.go).
	spare *spare
	// pause is the init of the apps' pid namespace.
	pause *pause
	res   map[*supervisor.App]*appRes
	// attach serves the apps' stdio to rkt attach (podattach).
	attach *podattach.Hub
	// console is the terminal of the interactive app's current or last
	// run, joined to the caller's (pod.Console; console.go).
	console atomic.Pointer[console.Console]
	// earlyDevLog are the /dev/log sockets made for the spare's brief,
	// before logs existed, until their app starts (withDevLog).
	earlyDevLog map[string]*podlog.SyslogSocket
	// reports carries the setup processes' reports to the loop
	// (readReport); early holds the exits of reported processes that
	// ended before their report was read (Adopt).
	reports chan *setupReport
	early   []reaper.Exit
	// commit is the lock keeper's commit pipe (commitFd, non-blocking),
	// or -1: the final statuses are then all written durably here; sent
	// counts the apps named on it.
	commit int
	sent   int
	// holdGo keeps the spare's go (heldGo) while the pod's first apps
	// start (releaseGo).
	holdGo bool
	heldGo []heldGo
	// gate is the read end of the pipe the pod's first apps' processes
	// wait on before their execve (appexec.GateFd), gateW its write end,
	// closed once every one of them exists (openGate); -1 when none.
	gate, gateW int
	// cgroupNS is the apps' cgroup namespace (appsCgroupNS), which the
	// set-up processes clone the apps' processes into
	// (appexec.CgroupNSFd), or -1: none on a host with v1 hierarchies.
	cgroupNS int
	// podPidsMax caches appsPidsMax; hostReady is set once run has
	// prepared the host (hostIsReady).
	podPidsMax *int
	hostReady  bool
}

// appRes is what appOS holds for one app.
type appRes struct {
	cg *cgroups.Group
	// pending is the run Start began and Started lets go on.
	pending pendingStart
	// handover is the report the run's setup process owes (the pid of
	// the app's process it clones); a report that is not this one is
	// of a run since replaced.
	handover *setupReport
	// logRun is the console's run of the process being started: its
	// report gives it the pid the console's lines show.
	logRun *podlog.Run
	// oom: the kernel's OOM killer killed in the cgroup Sweep last found
	// empty (read before it was removed).
	oom bool
	// emptied: Sweep found cg empty; it is removed after the app's
	// status, or before its next run (removeEmptied).
	emptied bool
}

// pendingStart is a run's first process waiting for its spec.
type pendingStart struct {
	pw   *os.File // the spec's pipe (or the spare's socket)
	spec []byte   // nil: nothing to send
	// stdio is sent with the go on the spare's socket (nil: the
	// process has its own), and the gate with it.
	stdio *[3]int
	gate  int
	// closeStdio releases our copies of the app's log pipes.
	closeStdio func()
}

var _ supervisor.OS = (*appOS)(nil)

func (o *appOS) resOf(a *supervisor.App) *appRes {
	r := o.res[a]
	if r == nil {
		r = &appRes{}
		if o.res == nil {
			o.res = map[*supervisor.App]*appRes{}
		}
		o.res[a] = r
	}
	return r
}

// gateFor is the gate of an app's process started now: the first apps'
// while they start, else /dev/null, which lets it go at once.
func (o *appOS) gateFor() int {
	if o.holdGo && o.gate >= 0 {
		return o.gate
	}
	return o.devNull
}

// openGate lets the pod's first apps' processes go, once none of them is
// still to be cloned (no app is starting).
func (o *appOS) openGate() {
	if o.gateW >= 0 {
		unix.Close(o.gateW)
		unix.Close(o.gate)
		o.gate, o.gateW = -1, -1
	}
}

// resByName is what appOS holds for the app of that name, nil if none.
func (o *appOS) resByName(name string) *appRes {
	for a, r := range o.res {
		if a.Name == name {
			return r
		}
	}
	return nil
}

func (o *appOS) cg(a *supervisor.App) *cgroups.Group {
	if r := o.res[a]; r != nil {
		return r.cg
	}
	return nil
}

func (o *appOS) Now() time.Time { return time.Now() }

func (o *appOS) Signal(a *supervisor.App, sig unix.Signal) {
	if a.Pid <= 0 {
		return
	}
	// The pid covers an app still setting up, before it is anything
	// but a member of its cgroup.
	_ = unix.Kill(a.Pid, sig)
	if cg := o.cg(a); cg != nil {
		cg.Signal(sig)
	} else {
		_ = unix.Kill(-a.Pid, sig)
	}
}

func (o *appOS) Kill(a *supervisor.App) {
	// The pid as well as the cgroup: an app whose move into its cgroup
	// failed is not in it, and one still setting up is killed either way.
	// With no pid (a setup process that ended before its report was
	// read) the cgroup holds what is left of the run.
	if a.Pid > 0 {
		_ = unix.Kill(a.Pid, unix.SIGKILL)
	}
	if cg := o.cg(a); cg != nil {
		if err := cg.Kill(); err == nil {
			return
		}
	}
	if a.Pid > 0 {
		_ = unix.Kill(-a.Pid, unix.SIGKILL)
	}
}

// Sweep kills whatever the app's last run left in its cgroup (the daemons
// it forked), so a restart starts clean and a finished app leaves nothing
// (threats P8). Their ends are PID 1's to reap (they are re-parented to
// it), and wake its loop, which then looks again.
//
// An emptied cgroup is removed later (removeEmptied): after the app's
// status when it is finished while the pod goes on, so that the status is
// not behind a removal in every hierarchy; not at all when the pod is
// ending (gc removes it with the pod's); before its next run when it
// restarts, which gets a fresh one.
func (o *appOS) Sweep(a *supervisor.App) bool {
	// The run is over: its attach clients are let go, and the caller's
	// terminal is given back once the app's last output is copied.
	o.attach.End(a.Name)
	o.endConsole(false)
	cg := o.cg(a)
	if cg == nil {
		return true
	}
	r := o.res[a]
	if r.emptied {
		return true
	}
	if !cg.Empty() {
		if err := cg.Kill(); err != nil {
			o.debugf("app %q: kill cgroup: %v", a.Name, err)
		}
		return false
	}
	// The OOM count dies with the cgroup: read it now.
	r.oom = cg.OOMKills() > 0
	r.emptied = true
	return true
}

// removeEmptied removes the app's cgroup once Sweep found it empty. A
// cgroup the kernel still accounts an exit to (EBUSY) is left: the pod's
// end, or the app's next run, removes it.
func (o *appOS) removeEmptied(r *appRes, name string) {
	if r == nil || r.cg == nil || !r.emptied {
		return
	}
	if err := r.cg.TryRemove(); err != nil {
		if !errors.Is(err, unix.EBUSY) {
			// Gone for any other reason: a new one is made.
			r.cg, r.emptied = nil, false
		}
		o.debugf("app %q: %v", name, err)
		return
	}
	r.cg, r.emptied = nil, false
}

// Release reports whether the kernel's OOM killer killed in the cgroup
// Sweep found empty.
func (o *appOS) Release(a *supervisor.App) bool {
	r := o.res[a]
	if r == nil {
		return false
	}
	oom := r.oom
	r.oom = false
	return oom
}

func (o *appOS) WriteRecord(a *supervisor.App) {
	a.Rec.LogDropped = o.logs.Dropped(a.Name)
	a.Rec.ConsoleDropped = o.logs.ConsoleDropped(a.Name)
	a.Rec.SyslogDropped = o.logs.SyslogDropped(a.Name)
	if err := o.dir.WriteRecord(&a.Rec); err != nil {
		o.logf("app %q: write record: %v", a.Name, err)
	}
	// The blocks of the writes that end the app are reserved while there
	// is space: the record's again after each write (a write consumes
	// its reservation), the status's when the app starts.
	switch a.Rec.State {
	case status.StateExited, status.StateRemoving:
		return
	case status.StateRunning:
		if err := o.dir.Reserve(a.Name, false); err != nil {
			o.logf("app %q: %v", a.Name, err)
		}
	}
	if err := o.dir.Reserve(a.Name, true); err != nil {
		o.logf("app %q: %v", a.Name, err)
	}
}

// WriteStatus writes the app's final status. The pod's last ones are left
// pending for the lock keeper to commit (status.WritePending), named to it
// on the commit pipe: it makes them durable and visible while the kernel
// ends PID 1, not before PID 1 may end, and before it releases the lock.
// Without a keeper to tell, with the pipe full, past status.MaxPending, or
// if the pending write fails, the status is written durably here.
//
// The app's emptied cgroup is removed after its status, unless the status
// is one of the pod's last: the pod is ending, and its cgroups stay for gc
// as the pod's own do (the waiter's check reads an app's leaf cgroup for
// less than PID 1's rmdir of it costs, one per hierarchy, 0.3 ms a pod's
// end traced, before PID 1 may exit).
func (o *appOS) WriteStatus(name string, code int, last bool) {
	// Finished for good: no run of it needs its sockets again.
	o.pod.CloseSockets(name)
	if !last {
		defer o.removeEmptied(o.resByName(name), name)
	}
	if last && o.commit >= 0 && o.sent < status.MaxPending && status.PendingApp(name) {
		err := o.dir.WritePending(name, code)
		if err == nil && o.tellKeeper(name) {
			o.sent++
			return
		}
		if err != nil {
			o.logf("app %q: write status %d for the lock keeper: %v", name, code, err)
		} else if _, err := status.CommitPending(o.dir.Fd(), []string{name}); err == nil {
			return
		}
		_ = unix.Unlinkat(o.dir.Fd(), name+status.PendingSuffix, 0)
	}
	if err := o.dir.Write(name, code); err != nil {
		o.logf("app %q: write status %d: %v", name, code, err)
	}
}

// tellKeeper names the app on the commit pipe, a line the keeper reads
// whole (a pipe write of at most PIPE_BUF bytes is all or nothing), and
// reports whether it was sent. A full pipe takes nothing; a keeper gone
// (EPIPE) commits nothing any more.
func (o *appOS) tellKeeper(name string) bool {
	line := append([]byte(name), handover.CommitLineEnd)
	for {
		_, err := unix.Write(o.commit, line)
		switch {
		case err == nil:
			return true
		case errors.Is(err, unix.EAGAIN):
			return false
		case errors.Is(err, unix.EINTR):
			continue
		}
		o.logf("commit pipe: %v; PID 1 commits its statuses", err)
		unix.Close(o.commit)
		o.commit = -1
		return false
	}
}

func (o *appOS) ClearStatus(name string) { _ = o.dir.Remove(name) }

func (o *appOS) Forget(a *supervisor.App) {
	o.attach.Remove(a.Name)
	o.logs.EndSyslog(a.Name)
	if cg := o.cg(a); cg != nil {
		_ = cg.Remove()
	}
	delete(o.res, a)
	o.forget(a.Name)
}

// forget deletes what PID 1 keeps of an app name, its final status too:
// stage0 removes that afterwards, but rkt's does it in an overlay pod's
// upper directory, under the mounted overlay, whose cached entry then
// fails the next status written under the name (ESTALE); and a status
// left in place would keep the lock keeper from committing the final
// status of an app added again under the name.
func (o *appOS) forget(name string) {
	o.dir.Unreserve(name)
	for _, f := range []string{name, name + status.PendingSuffix, name + status.RecordSuffix} {
		if err := unix.Unlinkat(o.dir.Fd(), f, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			o.logf("app %q: remove %s: %v", name, f, err)
		}
	}
	if err := os.Remove(written(layout.AppSpec(name))); err != nil && !errors.Is(err, os.ErrNotExist) {
		o.logf("app %q: remove spec: %v", name, err)
	}
}

// Logf logs a line of the supervisor's at its level: an impossible pair
// is a bug of PID 1's, logged as a warning (PID 1 goes on), not as the
// error line a failing process leaves.
func (o *appOS) Logf(level supervisor.Level, format string, a ...any) {
	switch level {
	case supervisor.Info:
		logx.Infof(format, a...)
	case supervisor.Bug:
		logx.Warnf("bug: "+format, a...)
	default:
		logx.Warnf(format, a...)
	}
}

func (o *appOS) Debugf(format string, a ...any) { o.debugf(format, a...) }

func (o *appOS) logf(format string, a ...any) { logx.Warnf(format, a...) }

func (o *appOS) debugf(format string, a ...any) { logx.Debugf(format, a...) }
