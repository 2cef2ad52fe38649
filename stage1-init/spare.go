package main

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/reaper"
)

// spare is an app process started before PID 1 knows its pod: the stage1
// binary re-executed as pod1-app, through its Go start-up (3-4 ms) and
// waiting for a spec. PID 1 starts it first thing, so that start-up
// overlaps run's preparation of the pod and PID 1's own, instead of
// following them on the way to the first app's exec
// (docs/benchmarks.md, start to exit). The first app takes it; if none
// can (no app, or one in a user namespace), it is killed once the apps are
// started.
type spare struct {
	pid  int
	spec *os.File // write end of its spec pipe
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

// takeSpare hands the spare to a, registered under a's tag, or returns nil
// when a must start its own: an app in a user namespace (its setup process
// reports on a pipe the spare lacks), an app of a pod with cgroups that
// could not get one (the spare is not in the pod's), or no spare left.
func (s *supervisor) takeSpare(a *app) *spare {
	sp := s.spare
	if sp == nil || a.cfg.Spec.UserNS != nil || a.cg == nil && s.pod.Cgroup != nil {
		return nil
	}
	s.spare = nil
	if !s.reaper.Retag(sp.pid, a) {
		// It died (and was reaped as the spare).
		sp.spec.Close()
		return nil
	}
	return sp
}

// dropSpare kills the spare if no app took it, and reaps it (its exit,
// under its own tag, is ignored; others collected meanwhile are kept), so
// that once the pod says it is ready the pod holds only its apps.
func (s *supervisor) dropSpare() {
	sp := s.spare
	if sp == nil {
		return
	}
	s.spare = nil
	_ = unix.Kill(sp.pid, unix.SIGKILL)
	sp.spec.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.pending = append(s.pending, s.reaper.Reap()...)
		if !s.reaper.Registered(sp.pid) || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
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
