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
func (o *appOS) Start(a *supervisor.App) (pid, hostPid int, err error) {
	defer func() {
		if err != nil {
			// The run that never was has nothing to attach to.
			o.attach.End(a.Name)
		}
	}()
	r := o.resOf(a)
	spec, err := json.Marshal(phaseSpec(a))
	if err != nil {
		return 0, 0, err
	}
	if err := o.ensureCgroup(a, r); err != nil {
		// The app's cgroup holds its device allow-list, its pids.max
		// and the limits the pod manifest asks for: none is optional,
		// and an app does not run without them.
		return 0, 0, fmt.Errorf("cgroup: %w", err)
	}
	stdio, closeStdio, err := o.stdio(a)
	if err != nil {
		return 0, 0, fmt.Errorf("stdio: %w", err)
	}
	if sp := o.takeSpare(a, r); sp != nil {
		r.pending = pendingStart{pw: sp.spec, spec: spec, stdio: &stdio, closeStdio: closeStdio}
		return o.admit(a, r, sp.pid)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		closeStdio()
		return 0, 0, err
	}
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
	if a.Cfg.Spec.UserNS != nil {
		// The setup process gets its spec inside fork; none is left
		// to send after it.
		b := spec
		fork = func() (int, error) { return o.forkInUserNS(a, r, files, attr, pw, b) }
		spec = nil
	}
	pid, err = o.reaper.Start(a, fork)
	pr.Close()
	if err != nil {
		pw.Close()
		closeStdio()
		return 0, 0, err
	}
	r.pending = pendingStart{pw: pw, spec: spec, closeStdio: closeStdio}
	return o.admit(a, r, pid)
}

// admit moves the run's first process into the app's cgroup, and returns
// its pid in the pod and on the host.
func (o *appOS) admit(a *supervisor.App, r *appRes, pid int) (int, int, error) {
	if r.cg != nil {
		if err := r.cg.Add(pid); err != nil {
			// Outside its cgroup it would have no device allow-list
			// and no limits: it dies before it reads its spec.
			o.logf("app %q: %v", a.Name, err)
			_ = unix.Kill(pid, unix.SIGKILL)
			r.pending.spec = nil
		}
	}
	return pid, hostPid(pid), nil
}

// Started sends the run's first process its spec (with its stdio on the
// spare's socket), now that the run is recorded.
func (o *appOS) Started(a *supervisor.App) {
	r := o.resOf(a)
	p := r.pending
	r.pending = pendingStart{}
	if p.pw == nil {
		return
	}
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
		err = sendWithStdio(p.pw, p.spec, *p.stdio)
	} else {
		_, err = p.pw.Write(p.spec)
	}
	if err != nil {
		o.debugf("app %q: send spec: %v", a.Name, err)
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
func (o *appOS) forkInUserNS(a *supervisor.App, r *appRes, files []uintptr, attr *syscall.SysProcAttr, pw *os.File, spec []byte) (int, error) {
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
	_ = rr.SetReadDeadline(time.Now().Add(setupTimeout))
	b, err := io.ReadAll(io.LimitReader(rr, 32))
	if err != nil {
		o.logf("app %q: setup did not report the app's process: %v", a.Name, err)
		_ = unix.Kill(pid, unix.SIGKILL)
		return pid, nil
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
		return n, nil
	}
	return pid, nil
}

func (o *appOS) ensureCgroup(a *supervisor.App, r *appRes) error {
	if o.pod.Cgroup == nil || r.cg != nil {
		return nil
	}
	cg, err := o.pod.Cgroup.Child(cgroups.AppsName + "/app-" + a.Name)
	if err != nil {
		return err
	}
	r.cg = cg
	if !o.pod.AllDevices {
		if err := cg.SetDevices(append(cgroups.AppDevices(o.pod.Interactive), a.Cfg.Devices...)); err != nil {
			return err
		}
	}
	if n := a.Cfg.Supervision.PidsMax; n > 0 {
		if err := cg.SetPidsMax(n); err != nil {
			return fmt.Errorf("pids.max: %w", err)
		}
	}
	// The resource isolators are in place before the app's first
	// process is moved in; run checked the controllers exist.
	if err := cg.SetLimits(a.Cfg.Resources); err != nil {
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
// stderr, per its modes (podspec.Stdio): /dev/null, ours (the caller's,
// for an interactive pod), a new log pipe, or the ends rkt attach's
// clients are served through (podattach; a stream's output is logged as
// well). close releases our copies once the app has its own.
func (o *appOS) stdio(a *supervisor.App) (fds [3]int, close func(), err error) {
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
	if att, err = o.attach.Begin(a.Name, a.Cfg.Stdio); err != nil {
		return fds, nil, err
	}
	if att != nil && att.Master >= 0 {
		// The terminal's output is the app's stdout.
		o.logs.Carry(a.Name, podlog.Stdout, a.Cfg.Stdio.CRIPath, att.Master, att.TTYTee)
	}
	modes := [3]string{a.Cfg.Stdio.Stdin, a.Cfg.Stdio.Stdout, a.Cfg.Stdio.Stderr}
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
	return fds, close, nil
}
