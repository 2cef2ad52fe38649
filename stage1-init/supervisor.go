package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/status"
)

// app is the supervisor's record of one app.
type app struct {
	spec    *appexec.Spec
	pid     int
	running bool
	done    bool
	rec     status.Record
}

// supervisor runs the apps of one pod with rkt's semantics: the pod ends
// when every app has exited; the first app to fail stops the others and
// its code becomes the pod's.
type supervisor struct {
	pod      *podspec.Pod
	dir      *status.Dir
	reaper   *reaper.Reaper
	apps     []*app
	stopping bool
	podCode  int
	graceC   <-chan time.Time
}

func newSupervisor(pod *podspec.Pod, dir *status.Dir) *supervisor {
	s := &supervisor{pod: pod, dir: dir, reaper: reaper.New()}
	for i := range pod.Apps {
		s.apps = append(s.apps, &app{spec: &pod.Apps[i]})
	}
	return s
}

func (s *supervisor) startAll() {
	for _, a := range s.apps {
		if s.stopping {
			a.done = true
			continue
		}
		if err := s.start(a); err != nil {
			// The app never ran: it gets the stage1 failure code,
			// and the pod stops like on any app failure.
			s.logf("app %q: start: %v", a.spec.App, err)
			s.finish(a, status.CodeStage1Failure)
		}
	}
}

// start clones the app's first process into a mount namespace of its own
// and hands it its spec; the child (appexec.Child) does the rest.
func (s *supervisor) start(a *app) error {
	spec, err := json.Marshal(a.spec)
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pw.Close()
	pid, err := s.reaper.Start(a, func() (int, error) {
		p, err := os.StartProcess("/proc/self/exe", []string{roleApp}, &os.ProcAttr{
			Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, pr},
			Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS},
		})
		if err != nil {
			return 0, err
		}
		// Read before Release, which resets Pid to -1.
		pid := p.Pid
		return pid, p.Release()
	})
	pr.Close()
	if err != nil {
		return err
	}
	a.pid, a.running = pid, true
	now := time.Now()
	a.rec.State, a.rec.PodPid, a.rec.Pid = status.StateRunning, pid, hostPid(pid)
	a.rec.StartedAt, a.rec.FinishedAt = &now, nil
	s.writeRecord(a)
	s.debugf("app %q: started as pid %d (host pid %d)", a.spec.App, pid, a.rec.Pid)
	// A child that dies before reading gives EPIPE here; its exit is
	// reaped and recorded like any other.
	if _, err := pw.Write(spec); err != nil {
		s.debugf("app %q: send spec: %v", a.spec.App, err)
	}
	return nil
}

// record handles reaped exits of apps.
func (s *supervisor) record(exits []reaper.Exit) {
	for _, e := range exits {
		a := e.Tag.(*app)
		a.running = false
		s.debugf("app %q: pid %d ended: %#x", a.spec.App, e.Pid, uint32(e.Status))
		code := status.FromWaitStatus(e.Status)
		t := e.Time
		a.rec.ExitCode, a.rec.FinishedAt, a.rec.Signal = &code, &t, ""
		a.rec.Pid, a.rec.PodPid = 0, 0
		if e.Status.Signaled() {
			a.rec.Signal = unix.SignalName(e.Status.Signal())
		}
		if r := failureReason(e.Status, code); r != "" {
			a.rec.LastFailure = r
		}
		s.finish(a, code)
	}
}

// finish writes the app's status before anything else happens, then applies
// the pod policy.
func (s *supervisor) finish(a *app, code int) {
	a.done = true
	if err := s.dir.Write(a.spec.App, code); err != nil {
		s.logf("app %q: write status %d: %v", a.spec.App, code, err)
	}
	if a.rec.ExitCode == nil {
		a.rec.ExitCode = &code
	}
	a.rec.State = status.StateExited
	s.writeRecord(a)
	if code != 0 && !s.stopping {
		s.podCode = code
		s.stop(fmt.Sprintf("app %q exited with %d", a.spec.App, code), false)
	}
}

// stop asks every running app to end, in reverse start order: SIGTERM to
// its process group, SIGKILL when the grace period is over (or at once
// when forced).
func (s *supervisor) stop(why string, force bool) {
	if force {
		s.debugf("stopping the pod now: %s", why)
		s.stopping = true
		s.killAll()
		return
	}
	if s.stopping {
		return
	}
	s.stopping = true
	s.debugf("stopping the pod: %s", why)
	for i := len(s.apps) - 1; i >= 0; i-- {
		if a := s.apps[i]; a.running {
			// The group covers what the app started; the pid covers
			// an app still setting up, before its setsid.
			_ = unix.Kill(-a.pid, unix.SIGTERM)
			_ = unix.Kill(a.pid, unix.SIGTERM)
		}
	}
	s.graceC = time.After(s.pod.GracePeriod)
}

func (s *supervisor) finished() bool {
	for _, a := range s.apps {
		if !a.done {
			return false
		}
	}
	return !s.pod.Mutable || s.stopping
}

func (s *supervisor) writeRecord(a *app) {
	a.rec.App = a.spec.App
	if err := s.dir.WriteRecord(&a.rec); err != nil {
		s.logf("app %q: write record: %v", a.spec.App, err)
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

// hostPid maps a pid of the pod's namespace to the host's: the fdinfo of a
// pidfd shows the pid as seen by the procfs it is read through, and PID 1's
// /proc is still the host's.
func hostPid(pid int) int {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
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
