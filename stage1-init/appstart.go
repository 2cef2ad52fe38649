package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/podattach"
	"github.com/pod1/pod1/podlog"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/status"
)

// start runs the app once: a fresh cgroup is made for the run, the first
// process is cloned in a mount namespace of its own, moved into the cgroup
// and only then handed its spec (it does nothing before reading it, so it
// cannot fork outside); the child (appexec.Child) does the rest.
//
// CLONE_INTO_CGROUP would save the move, but on 6.x kernels a process
// cloned into a cgroup that was ever written "1" to cgroup.kill can be
// killed at birth (the kill sequence is compared across cgroups), which
// is every restart's case.
func (s *supervisor) start(a *app) (err error) {
	defer func() {
		if err != nil {
			// The run that never was has nothing to attach to.
			s.attach.End(a.name)
		}
	}()
	spec, err := json.Marshal(&a.cfg.Spec)
	if err != nil {
		return err
	}
	if err := s.ensureCgroup(a); err != nil {
		// The app's cgroup holds its device allow-list, its pids.max
		// and the limits the pod manifest asks for: none is optional,
		// and an app does not run without them.
		return fmt.Errorf("cgroup: %w", err)
	}
	stdio, closeStdio, err := s.stdio(a)
	if err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	// Our copies of the log pipes' write ends: the app holds its own.
	defer closeStdio()
	if sp := s.takeSpare(a); sp != nil {
		defer sp.spec.Close()
		s.started(a, sp.pid, sp.spec, spec, &stdio)
		return nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pw.Close()
	attr := &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}
	// syscall.ForkExec, not os.StartProcess: the latter's first call
	// forks and reaps a throwaway child to probe clone(CLONE_PIDFD)
	// (os.checkPidfd) on the first app's start path, for a pidfd the
	// reaper, which owns wait4, never uses.
	files := []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2]), pr.Fd()}
	fork := func() (int, error) {
		return syscall.ForkExec("/proc/self/exe", []string{roleApp}, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: files,
			Sys:   attr,
		})
	}
	if a.cfg.Spec.UserNS != nil {
		// The setup process gets its spec inside fork; none is left
		// to send after it.
		b := spec
		fork = func() (int, error) { return s.forkInUserNS(a, files, attr, pw, b) }
		spec = nil
	}
	pid, err := s.reaper.Start(a, fork)
	pr.Close()
	if err != nil {
		return err
	}
	s.started(a, pid, pw, spec, nil)
	return nil
}

// started records the app's first process, pid, moves it into the app's
// cgroup and only then sends it its spec on pw (nothing when spec is nil:
// it has it), with its stdio when stdio is not nil (the spare's socket).
func (s *supervisor) started(a *app, pid int, pw *os.File, spec []byte, stdio *[3]int) {
	now := time.Now()
	a.state, a.pid = stateRunning, pid
	a.starts = append(a.starts, now)
	if len(a.starts) > a.cfg.Supervision.Burst {
		a.starts = a.starts[len(a.starts)-a.cfg.Supervision.Burst:]
	}
	if a.cg != nil {
		if err := a.cg.Add(pid); err != nil {
			// Outside its cgroup it would have no device allow-list
			// and no limits: it dies before it reads its spec.
			s.logf("app %q: %v", a.name, err)
			_ = unix.Kill(pid, unix.SIGKILL)
			spec = nil
		}
	}
	a.rec.State, a.rec.PodPid, a.rec.Pid = status.StateRunning, pid, hostPid(pid)
	a.rec.StartedAt, a.rec.FinishedAt, a.rec.ExitCode, a.rec.Signal = &now, nil, nil, ""
	s.writeRecord(a)
	s.debugf("app %q: started as pid %d (host pid %d)", a.name, pid, a.rec.Pid)
	// A child that dies before reading gives EPIPE here; its exit is
	// reaped and recorded like any other.
	if spec != nil {
		var err error
		if stdio != nil {
			err = sendWithStdio(pw, spec, *stdio)
		} else {
			_, err = pw.Write(spec)
		}
		if err != nil {
			s.debugf("app %q: send spec: %v", a.name, err)
		}
	}
}

// setupTimeout bounds how long PID 1 waits for an app's setup process to
// report the app's process in its user namespace (mounts on a hung file
// system could block it).
const setupTimeout = 30 * time.Second

// forkInUserNS starts an app whose process lives in a user namespace
// (appexec.startInUserNS): the setup process is cloned, moved into the
// app's cgroup and given its spec, and reports the pid of the app's
// process, which it cloned as our child. That pid is the app's; the setup
// process's exit is then an orphan's. If it reports nothing, it failed,
// and its pid, whose exit status says how, stands for the app. It runs
// inside reaper.Start, so no exit is collected before the app's pid is
// registered.
func (s *supervisor) forkInUserNS(a *app, files []uintptr, attr *syscall.SysProcAttr, pw *os.File, spec []byte) (int, error) {
	rr, rw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer rr.Close()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{roleApp}, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: append(files[:len(files):len(files)], rw.Fd()),
		Sys:   attr,
	})
	rw.Close()
	if err != nil {
		return 0, err
	}
	// In its cgroup before it reads its spec: the app's process is
	// born there.
	if a.cg != nil {
		if err := a.cg.Add(pid); err != nil {
			s.logf("app %q: %v", a.name, err)
			_ = unix.Kill(pid, unix.SIGKILL)
			return pid, nil
		}
	}
	if _, err := pw.Write(spec); err != nil {
		s.debugf("app %q: send spec: %v", a.name, err)
	}
	pw.Close()
	_ = rr.SetReadDeadline(time.Now().Add(setupTimeout))
	b, err := io.ReadAll(io.LimitReader(rr, 32))
	if err != nil {
		s.logf("app %q: setup did not report the app's process: %v", a.name, err)
		_ = unix.Kill(pid, unix.SIGKILL)
		return pid, nil
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
		return n, nil
	}
	return pid, nil
}

func (s *supervisor) ensureCgroup(a *app) error {
	if s.pod.Cgroup == nil || a.cg != nil {
		return nil
	}
	cg, err := s.pod.Cgroup.Child(cgroups.AppsName + "/app-" + a.name)
	if err != nil {
		return err
	}
	a.cg = cg
	if err := cg.SetDevices(cgroups.AppDevices(s.pod.Interactive)); err != nil {
		return err
	}
	if n := a.cfg.Supervision.PidsMax; n > 0 {
		if err := cg.SetPidsMax(n); err != nil {
			return fmt.Errorf("pids.max: %w", err)
		}
	}
	// The resource isolators are in place before the app's first
	// process is moved in; run checked the controllers exist.
	if err := cg.SetLimits(a.cfg.Resources); err != nil {
		return fmt.Errorf("resource isolators: %w", err)
	}
	return nil
}

// cleanCgroup kills whatever the app's last run left in its cgroup (the
// daemons it forked) and waits, reaping, until the cgroup is empty, so a
// restart starts clean and a finished app leaves nothing (threats P8).
// Exits of other apps collected meanwhile are kept for the main loop.
func (s *supervisor) cleanCgroup(a *app) {
	if a.cg == nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for !a.cg.Empty() {
		if err := a.cg.Kill(); err != nil {
			s.debugf("app %q: kill cgroup: %v", a.name, err)
		}
		if time.Now().After(deadline) {
			s.logf("app %q: processes left in its cgroup after 5s", a.name)
			return
		}
		time.Sleep(200 * time.Microsecond)
		s.pending = append(s.pending, s.reaper.Reap()...)
	}
	// The OOM count dies with the cgroup: read it first.
	if n := a.cg.OOMKills(); n > 0 {
		a.rec.LastFailure = status.ReasonOOM
	}
	if err := a.cg.Remove(); err != nil {
		s.debugf("app %q: %v", a.name, err)
		return
	}
	a.cg = nil
}

func (s *supervisor) writeRecord(a *app) {
	a.rec.App = a.name
	a.rec.LogDropped = s.logs.Dropped(a.name)
	if err := s.dir.WriteRecord(&a.rec); err != nil {
		s.logf("app %q: write record: %v", a.name, err)
	}
	// The blocks of the writes that end the app are reserved while there
	// is space: the record's again after each write (a write consumes
	// its reservation), the status's when the app starts.
	switch a.rec.State {
	case status.StateExited, status.StateRemoving:
		return
	case status.StateRunning:
		if err := s.dir.Reserve(a.name, false); err != nil {
			s.logf("app %q: %v", a.name, err)
		}
	}
	if err := s.dir.Reserve(a.name, true); err != nil {
		s.logf("app %q: %v", a.name, err)
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
// stderr, per its modes (podspec.Stdio): /dev/null, ours (the caller's,
// for an interactive pod), a new log pipe, or the ends rkt attach's
// clients are served through (podattach; a stream's output is logged as
// well). close releases our copies once the app has its own.
func (s *supervisor) stdio(a *app) (fds [3]int, close func(), err error) {
	var pipes []*os.File
	var att *podattach.Run
	close = func() {
		for _, p := range pipes {
			p.Close()
		}
		if att != nil {
			att.Started()
		}
	}
	if att, err = s.attach.Begin(a.name, a.cfg.Stdio); err != nil {
		return fds, nil, err
	}
	if att != nil && att.Master >= 0 {
		// The terminal's output is the app's stdout.
		s.logs.Carry(a.name, podlog.Stdout, a.cfg.Stdio.CRIPath, att.Master, att.TTYTee)
	}
	modes := [3]string{a.cfg.Stdio.Stdin, a.cfg.Stdio.Stdout, a.cfg.Stdio.Stderr}
	for i, m := range modes {
		switch {
		case m == podspec.StdioInteractive:
			fds[i] = i
		case m == podspec.StdioTTY || m == podspec.StdioStream && i == 0:
			fds[i] = att.Fds[i]
		case m == podspec.StdioLog || m == podspec.StdioStream:
			var tee podlog.Tee
			if att != nil && att.Tees[i] != nil {
				tee = att.Tees[i]
			}
			w, err := s.logs.PipeTee(a.name, i, a.cfg.Stdio.CRIPath, tee)
			if err != nil {
				close()
				return fds, nil, err
			}
			pipes = append(pipes, w)
			fds[i] = int(w.Fd())
		default:
			// null, and the zero value of a configuration from
			// before stdio modes.
			fds[i] = s.devNull
		}
	}
	return fds, close, nil
}
