package main

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/supervisor"
)

// spare is an app process started before PID 1 knows its pod: the stage1
// binary re-executed as pod1-app, through its Go start-up and
// waiting for a spec. PID 1 starts it first thing, so that start-up
// overlaps run's preparation of the pod and PID 1's own, instead of
// following them on the way to the first app's exec
// (docs/benchmarks.md, start to exit). The first app takes it; if none
// can (no app, or one in a user namespace), it is killed once the apps are
// started.
type spare struct {
	pid  int
	spec *os.File // write end of its spec pipe
	// in is the app whose cgroup the spare was moved into before the
	// apps started (admitSpare), nil if none was.
	in *supervisor.App
}

// spareTag tags the spare in the reaper until an app takes it over.
type spareTag struct{}

// startSpare clones the spare as start does an app's first process (a
// mount namespace of its own, stdio, the spec pipe on appexec.SpecFd). It
// is born before run moves PID 1 into its cgroup, so it is moved into the
// app's when taken. It returns nil if it cannot be started: the first app
// then starts the usual way.
func startSpare(r *reaper.Reaper) *spare {
	// A socket, not a pipe: the app's stdio, unknown yet, comes with
	// the spec (appexec.recvStdio).
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	pr, pw := os.NewFile(uintptr(fds[0]), "spare-spec"), os.NewFile(uintptr(fds[1]), "spare-spec")
	defer pr.Close()
	files := []uintptr{os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd(), pr.Fd()}
	pid, err := r.Start(spareTag{}, func() (int, error) {
		return syscall.ForkExec("/proc/self/exe", []string{roleApp}, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: files,
			Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS},
		})
	})
	if err != nil {
		pw.Close()
		return nil
	}
	return &spare{pid: pid, spec: pw}
}

// admitSpare moves the spare into the cgroup of a, the first app to
// start, made and limited as a's start makes it (ensureCgroup), before
// the apps may start; a's start then skips the move. A move into a cgroup
// waits for an RCU grace period (the kernel's cgroup_threadgroup_rwsem)
// unless another move was made within about one: made here, right after
// PID 1's own, it is quick, where at a's start, a few milliseconds later,
// it often was not (bench/profile.md). Nothing is done when a cannot take
// the spare (takeSpare) or on an error, which a's start meets again and
// reports.
func (o *appOS) admitSpare(a *supervisor.App) {
	sp := o.spare
	if sp == nil || a.Cfg.Spec.UserNS != nil || o.pod.Cgroup == nil {
		return
	}
	r := o.resOf(a)
	if err := o.ensureCgroup(a, r); err != nil || r.cg == nil {
		// a's start makes and limits it again, from the start, and
		// reports what fails: no app runs with part of its limits.
		r.cg = nil
		return
	}
	if r.cg.Add(sp.pid) == nil {
		sp.in = a
	}
}

// takeSpare hands the spare to a, registered under a's tag, or returns nil
// when a must start its own: an app in a user namespace (its setup process
// reports on a pipe the spare lacks), an app of a pod with cgroups that
// could not get one (the spare is not in the pod's), or no spare left.
func (o *appOS) takeSpare(a *supervisor.App, r *appRes) *spare {
	sp := o.spare
	if sp == nil || a.Cfg.Spec.UserNS != nil || r.cg == nil && o.pod.Cgroup != nil {
		return nil
	}
	o.spare = nil
	if !o.reaper.Retag(sp.pid, a) {
		// It died (and was reaped as the spare).
		sp.spec.Close()
		return nil
	}
	return sp
}

// dropSpare kills the spare if no app took it. It reports whether PID 1
// is to wait for its end (the loop reaps it under its own tag), so that
// once the pod says it is ready the pod holds only its apps.
func (o *appOS) dropSpare() bool {
	sp := o.spare
	if sp == nil {
		return false
	}
	o.spare = nil
	_ = unix.Kill(sp.pid, unix.SIGKILL)
	sp.spec.Close()
	return o.reaper.Registered(sp.pid)
}

// sendWithStdio sends the spec on the spare's socket with the app's
// stdin, stdout and stderr attached to its first bytes.
func sendWithStdio(w *os.File, spec []byte, stdio [3]int) error {
	first := spec[:min(len(spec), 32<<10)]
	n, err := unix.SendmsgN(int(w.Fd()), first, unix.UnixRights(stdio[:]...), nil, 0)
	for errors.Is(err, unix.EINTR) {
		n, err = unix.SendmsgN(int(w.Fd()), first, unix.UnixRights(stdio[:]...), nil, 0)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(spec[n:])
	return err
}
