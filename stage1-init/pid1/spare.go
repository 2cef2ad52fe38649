package pid1

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/starttricks"
	"github.com/pod1/pod1/supervisor"
)

// spare is an app process started before PID 1 knows its pod: the stage1
// binary re-executed as pod1-app, through its Go start-up and
// waiting for a spec. PID 1 starts it first thing, so that start-up
// overlaps run's preparation of the pod and PID 1's own, instead of
// following them on the way to the first app's exec
// (docs/design-start.md, the spare). It is briefed with the first app's
// spec as soon as PID 1 has its configuration, and sets the app's root up
// meanwhile; the app takes it when it starts, by its go. If no app can (no
// app, or one in a user namespace), it is killed once the apps are
// started.
type spare struct {
	pid  int
	spec *os.File // our end of its spec socket
	// report is the read end of its report pipe (appexec.ReportFd):
	// the pid of the app's process it clones.
	report *os.File
	// in is the app whose cgroup the spare was moved into before the
	// apps started (admitSpare), nil if none was.
	in *supervisor.App
	// briefed is the spec the spare was sent (briefSpare, takeSpare),
	// nil until it is.
	briefed []byte
}

// spareTag tags the spare in the reaper until an app takes it over.
type spareTag struct{}

// startSpare clones the spare as start does an app's first process (a
// mount namespace of its own, stdio, the spec pipe on appexec.SpecFd). It
// is born before run moves PID 1 into its cgroup, so it is moved into the
// app's when taken. It returns nil if it cannot be started: the first app
// then starts the usual way.
func startSpare(r *reaper.Reaper) *spare {
	if !starttricks.On(starttricks.Spare) {
		return nil
	}
	// A socket, not a pipe: the app's stdio, unknown yet, comes with
	// its go (sendGo).
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	pr, pw := os.NewFile(uintptr(fds[0]), "spare-spec"), os.NewFile(uintptr(fds[1]), "spare-spec")
	defer pr.Close()
	rr, rw, err := os.Pipe()
	if err != nil {
		pw.Close()
		return nil
	}
	defer rw.Close()
	// Its own socket stands in for the descriptors it is handed later
	// (appexec.PidNSFd, GateFd, CgroupNSFd): their numbers are taken
	// from its birth, by nothing of its Go runtime's.
	files := make([]uintptr, appexec.CgroupNSFd+1)
	files[0], files[1], files[2] = os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd()
	files[appexec.SpecFd], files[appexec.ReportFd] = pr.Fd(), rw.Fd()
	files[appexec.PidNSFd], files[appexec.GateFd], files[appexec.CgroupNSFd] = pr.Fd(), pr.Fd(), pr.Fd()
	pid, err := r.Start(spareTag{}, func() (int, error) {
		return syscall.ForkExec("/proc/self/exe", []string{handover.RoleApp}, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: files,
			Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS},
		})
	})
	if err != nil {
		pw.Close()
		rr.Close()
		return nil
	}
	return &spare{pid: pid, spec: pw, report: rr}
}

// admitSpare moves the spare into the cgroup of a, the first app to
// start, made and limited as a's start makes it (ensureCgroup), before
// the apps may start; a's start then skips the move. A move into a cgroup
// waits for an RCU grace period (the kernel's cgroup_threadgroup_rwsem)
// unless another move was made within about one: made here, right after
// PID 1's own, it is quick, where at a's start, a few milliseconds later,
// it often was not (docs/design-start.md). Nothing is done when a cannot take
// the spare (takeSpare) or on an error, which a's start meets again and
// reports.
func (o *appOS) admitSpare(a *supervisor.App) {
	sp := o.spare
	if sp == nil || a.Cfg.Spec.UserNS != nil || a.Cfg.Spec.ConsolePts || len(a.Cfg.Sockets) > 0 || o.pod.Cgroup == nil {
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

// briefSpare sends the spare a's spec as soon as PID 1 has its
// configuration, so that it sets a's root up while PID 1 sets up its own
// (appexec.SpareBrief); it runs nothing of a before its go (sendGo). Only
// the spare admitted into a's cgroup is briefed, which then is where the
// set-up finds the cgroups it shows a, and only for a's main command, the
// spec a's start then sends (takeSpare compares).
func (o *appOS) briefSpare(a *supervisor.App, procfs, shm int) {
	sp := o.spare
	if sp == nil || sp.in != a && o.pod.Cgroup != nil || a.Cfg.Spec.UserNS != nil || a.Cfg.Spec.ConsolePts || len(a.Cfg.PreStart) > 0 {
		return
	}
	// As Start makes it (takeSpare compares), but for StageBinds:
	// the spare's mount namespace has none of PID 1's root.
	spec, err := json.Marshal(o.runSpec(a, &a.Cfg.Spec))
	if err != nil {
		return
	}
	// The apps' pid namespace, a procfs of it, the pod's /dev/shm and
	// the apps' cgroup namespace come with it: the spare was started
	// before PID 1 had any (appexec.AppsProc, appexec.PodShm).
	if sendAll(sp.spec, appexec.SpareBrief(spec), appexec.SpareBriefRights(procfs, o.pause.pidns, shm, o.cgroupNS)) == nil {
		sp.briefed = spec
	}
	// On an error the spare is gone: a's start meets its end and starts
	// a's own.
}

// takeSpare hands the spare to a, briefed with spec, registered under a's
// tag, or returns nil when a must start its own: an app in a user
// namespace (its setup process reports on a pipe the spare lacks), the
// app of an interactive pod's console (its set-up copies the console's
// devpts from PID 1's root, which the spare's older mount namespace
// lacks), an app with sockets (its go carries none), an app of a pod
// with cgroups that could not get one (the spare is not in the pod's), a
// spare briefed with another spec (dropSpare ends it once the
// apps are started), or no spare left.
func (o *appOS) takeSpare(a *supervisor.App, r *appRes, spec []byte) *spare {
	sp := o.spare
	if sp == nil || a.Cfg.Spec.UserNS != nil || a.Cfg.Spec.ConsolePts || len(a.Cfg.Sockets) > 0 || r.cg == nil && o.pod.Cgroup != nil ||
		sp.briefed != nil && !bytes.Equal(sp.briefed, spec) {
		return nil
	}
	o.spare = nil
	if !o.reaper.Retag(sp.pid, a) {
		// It died (and was reaped as the spare).
		sp.spec.Close()
		sp.report.Close()
		return nil
	}
	if sp.briefed == nil {
		// A spare dead by now shows at the go (EPIPE) and is reaped
		// as a's. PID 1's root has the apps' procfs by now: the
		// spare's mount namespace, copied before, does not.
		fd, err := unix.OpenTree(unix.AT_FDCWD, appexec.AppsProc, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			shm, err := unix.OpenTree(unix.AT_FDCWD, appexec.PodShm, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err == nil {
				_ = sendAll(sp.spec, appexec.SpareBrief(spec), appexec.SpareBriefRights(fd, o.pause.pidns, shm, o.cgroupNS))
				unix.Close(shm)
			}
			unix.Close(fd)
		}
	}
	return sp
}

// sendAll writes b on the socket w, the descriptors of oob with its
// first byte.
func sendAll(w *os.File, b, oob []byte) error {
	for len(b) > 0 {
		n, err := unix.SendmsgN(int(w.Fd()), b, oob, nil, unix.MSG_NOSIGNAL)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b, oob = b[n:], nil
	}
	return nil
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
	sp.report.Close()
	return o.reaper.Registered(sp.pid)
}

// sendGo lets the spare run its app, with the app's stdin, stdout and
// stderr and its gate (appexec.GoByte).
func sendGo(w *os.File, stdio [3]int, gate int) error {
	rights := unix.UnixRights(stdio[0], stdio[1], stdio[2], gate)
	err := unix.Sendmsg(int(w.Fd()), []byte{appexec.GoByte}, rights, nil, 0)
	for errors.Is(err, unix.EINTR) {
		err = unix.Sendmsg(int(w.Fd()), []byte{appexec.GoByte}, rights, nil, 0)
	}
	return err
}
