package podstart

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/machined"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/sigpolicy"
	"github.com/pod1/pod1/sockact"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/stage1-init/netexec"
	"github.com/pod1/pod1/stage1-init/selfexe"
	"github.com/pod1/pod1/starttricks"
	"github.com/pod1/pod1/status"
)

// podStart is run's last part, the pod's start: it clones the pod's PID 1
// into the pod's namespaces and starts the lock keeper, prepares what is
// left (cgroups, networks, the pod's files) while PID 1's runtime starts,
// sends PID 1 its configuration, and hands PID 1 over to the waiter, whose
// exit code is then PID 1's, the pod's. The supervision itself is PID 1's
// (package pid1).
//
// It is a sequence of steps (cloneInitAndHandOver) over what it holds. Every descriptor it
// opens is in fds, closed by close, once, on whichever path ends the
// start; a step that hands a descriptor on (to PID 1, whose clone has its
// copy, or to the keeper's start) or is done with it closes it at once
// and leaves -1 in its place. What else a failed start leaves (PID 1, the
// cgroups, the app directory's bind) fail and close undo.
type podStart struct {
	pod    *podspec.Pod
	f      *runFlags
	podDir string
	lock   *os.File
	req    *sigpolicy.Requests
	w      *waiter
	// started is when the run began: the pod's start (writePid).
	started time.Time

	fds startFds
	// undoBind undoes the shared bind of a mutable pod's app directory
	// (shareStage2), nil if there is none.
	undoBind func()
	// pid is PID 1's, 0 until it is cloned.
	pid int
	// keeperDone reports the keeper's start (startKeeper), keeper its
	// pid; joinKeeper waits for it.
	keeperDone chan error
	keeperErr  error
	keeper     int
	// cgroupsMade: the pod's cgroups exist, and are emptied (and left
	// for gc) if the start ends before the hand-over.
	cgroupsMade bool
	// machine is the pod's registration with systemd-machined that waits
	// for PID 1 to be in its cgroup, nil if there is none to make.
	machine *machined.Pending
	// sendErr is what sending PID 1 its configuration met (PID 1 died
	// before reading it).
	sendErr error
}

// startFds are the descriptors the start holds, -1 where it holds none.
type startFds struct {
	// pause is pod1-pause's binary, read-only: PID 1's PauseExeFd.
	pause int
	// logDir, criDir and journalDir are the pod's log directories:
	// PID 1's LogDirFd, CRIDirFd and JournalDirFd.
	logDir, criDir, journalDir int
	// configR and configW are the configuration pipe: PID 1 reads
	// (ConfigFd), run writes the configuration, then HostReady.
	configR, configW int
	// readyR and readyW are the ready pipe: PID 1 writes (ReadyFd), run
	// reads.
	readyR, readyW int
	// commitR and commitW are the commit pipe: PID 1 writes (CommitFd),
	// the keeper reads (KeeperCommitFd).
	commitR, commitW int
	// parent is a copy of the waiter's pidfd, for PID 1 (ParentFd).
	parent int
	// initExe is pod1-init's binary, read-only, which PID 1 is executed
	// from (through its number, selfexe.ReadOnlySibling).
	initExe int
	// done is the waiter's done pipe's write end, for the keeper
	// (KeeperDoneFd).
	done int
}

func noStartFds() startFds {
	return startFds{pause: -1, logDir: -1, criDir: -1, journalDir: -1, configR: -1, configW: -1, readyR: -1, readyW: -1,
		commitR: -1, commitW: -1, parent: -1, initExe: -1, done: -1}
}

// closeAll closes every descriptor still held.
func (s *startFds) closeAll() {
	for _, fd := range []*int{&s.pause, &s.logDir, &s.criDir, &s.journalDir, &s.configR, &s.configW, &s.readyR, &s.readyW,
		&s.commitR, &s.commitW, &s.parent, &s.initExe, &s.done} {
		closeFd(fd)
	}
}

// closeFd closes *fd if it is held, and leaves -1 in its place.
func closeFd(fd *int) {
	if *fd >= 0 {
		unix.Close(*fd)
		*fd = -1
	}
}

// take hands *fd on: the caller owns it from now, and -1 is left.
func take(fd *int) int {
	v := *fd
	*fd = -1
	return v
}

// orNoFd is fd as a child's file: handover.NoFd for none.
func orNoFd(fd int) uintptr {
	if fd < 0 {
		return handover.NoFd
	}
	return uintptr(fd)
}

// cloneInitAndHandOver starts the pod (podStart), and returns run's exit
// code when it could not hand PID 1 over to the waiter: on a hand-over
// the process exits 0 at once (handOverOrWait).
func cloneInitAndHandOver(s *podStart) int {
	s.fds = noStartFds()
	defer s.close()
	for _, step := range []func() error{
		s.openFiles,
		s.clonePID1,
		s.startKeeper,
		s.setUpCgroups,
		s.setUpHost,
		s.sendConfig,
		s.awaitPID1,
	} {
		if err := step(); err != nil {
			return s.fail(err)
		}
	}
	return s.handOver()
}

// openFiles opens what PID 1 is handed: the app directory's shared bind
// first (a mutable pod's: PID 1's mount namespace copies it), pod1-pause's
// binary, the log directories, the pipes and the waiter's pidfd.
func (s *podStart) openFiles() error {
	if s.pod.Mutable {
		undo, err := shareStage2(s.podDir)
		if err != nil {
			return err
		}
		s.undoBind = undo
	}
	// pod1-pause, which PID 1 starts, from next to our binary.
	var err error
	if s.fds.pause, err = selfexe.ReadOnlyTree(handover.PauseBinary); err != nil {
		return err
	}
	logs, err := openLogSinks(s.podDir, s.pod)
	if err != nil {
		return err
	}
	s.fds.logDir, s.fds.criDir, s.fds.journalDir = fdOf(logs[0]), fdOf(logs[1]), fdOf(logs[2])
	// PID 1 is started first, and the pod directory, the cgroups and
	// the pid file are prepared while its runtime starts: it does
	// nothing before it has read its configuration, which is sent only
	// once all that is done and PID 1 is in its cgroup. Started last,
	// its Go start-up came after ours on the pod's start path
	// (docs/design-start.md).
	for _, p := range []struct {
		r, w *int
		name string
	}{
		{&s.fds.configR, &s.fds.configW, "configuration"},
		{&s.fds.readyR, &s.fds.readyW, "ready"},
		// PID 1 says on it that it left a final status for the lock
		// keeper to commit (status.WritePending); the keeper reads.
		{&s.fds.commitR, &s.fds.commitW, "commit"},
	} {
		var fds [2]int
		if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("%s pipe: %w", p.name, err)
		}
		*p.r, *p.w = fds[0], fds[1]
	}
	if !starttricks.On(starttricks.Commit) {
		// Without a commit pipe PID 1 makes its statuses durable.
		closeFd(&s.fds.commitR)
		closeFd(&s.fds.commitW)
	}
	// PID 1 waits on its ends of the configuration and ready pipes in
	// its runtime's poller, which costs it no thread: it takes the
	// descriptors that are non-blocking there. run's ends, its own
	// open files, stay blocking.
	for _, fd := range []int{s.fds.configR, s.fds.readyW} {
		if err := unix.SetNonblock(fd, true); err != nil {
			return fmt.Errorf("PID 1's pipes: %w", err)
		}
	}
	s.fds.parent = s.w.pidfdCopy()
	s.fds.done = s.w.takeDone()
	return nil
}

// fdOf is a child's file as a descriptor: -1 for none.
func fdOf(fd uintptr) int {
	if fd == handover.NoFd {
		return -1
	}
	return int(fd)
}

// clonePID1 clones PID 1 from the start-path binary, into the pod's
// namespaces, as the waiter's child, and closes the ends it has its copies
// of.
func (s *podStart) clonePID1() error {
	files := (&handover.PID1Files{
		Stdin: os.Stdin.Fd(), Stdout: os.Stdout.Fd(), Stderr: os.Stderr.Fd(),
		Config: orNoFd(s.fds.configR), Parent: orNoFd(s.fds.parent), Ready: orNoFd(s.fds.readyW),
		LogDir: orNoFd(s.fds.logDir), CRIDir: orNoFd(s.fds.criDir),
		Commit: orNoFd(s.fds.commitW), PauseExe: orNoFd(s.fds.pause),
		JournalDir: orNoFd(s.fds.journalDir),
	}).Files()
	// The sockets passed to rkt run, after the hand-over's fds: their
	// numbers go to PID 1 in the configuration (sockact.Hand).
	files = sockact.Hand(s.pod, files)
	// syscall.ForkExec, not os.StartProcess: the latter's first call in a
	// process forks and reaps a throwaway child to probe clone(CLONE_PIDFD)
	// (os.checkPidfd), a whole fork+exit+wait on the pod's start path
	// (docs/design-start.md) for a pidfd we never use.
	// PID 1 is the start-path binary, not this one: it links only what
	// PID 1 and the apps' set-up need (docs/design-start.md).
	exe, exePath, err := selfexe.ReadOnlySibling(handover.InitBinary, files)
	if err != nil {
		return err
	}
	s.fds.initExe = exe
	// From a thread of its own, which PID 1's parent-death signal is tied
	// to, with the pod's bounding set (forkPID1).
	pid, err := forkPID1(s.pod.BoundingSet(), exePath, append([]string{handover.RoleInit}, starttricks.Args()...), &syscall.ProcAttr{
		Dir:   s.podDir,
		Env:   os.Environ(),
		Files: files,
		Sys: &syscall.SysProcAttr{
			Cloneflags: cloneFlags(s.f) | unix.CLONE_PARENT,
			// A process group of its own: the terminal's signals
			// (Ctrl-C, Ctrl-\) reach the waiter alone, which passes each on
			// once, as it does every other stop request. With a
			// console, a session of its own: PID 1 reads and sets the
			// caller's terminal, which in the caller's session, from
			// a background group, would stop it (SIGTTIN, SIGTTOU)
			// or fail.
			Setpgid: !s.f.opts.Console,
			Setsid:  s.f.opts.Console,
		},
	})
	// PID 1's ends, and what only it executes: it has its copies.
	for _, fd := range []*int{&s.fds.configR, &s.fds.readyW, &s.fds.commitW, &s.fds.parent, &s.fds.pause, &s.fds.initExe, &s.fds.journalDir} {
		closeFd(fd)
	}
	if err != nil {
		return fmt.Errorf("start pod init: %w", err)
	}
	s.pid = pid
	return nil
}

// startKeeper starts the lock keeper, in a goroutine that owns what it
// hands the keeper (its fork and exec are on no one's way until PID 1 gets
// its configuration: joinKeeper waits for it before then). The keeper's
// pidfd of PID 1 is opened now, while PID 1 surely is ours and unreaped.
// Besides the lock, the pidfd and the commit pipe, the keeper holds the
// waiter's done pipe.
func (s *podStart) startKeeper() error {
	s.keeperDone = make(chan error, 1)
	kpidfd, err := unix.PidfdOpen(s.pid, 0)
	if err != nil {
		s.keeperDone <- fmt.Errorf("lock keeper: pidfd of PID 1: %w", err)
		closeFd(&s.fds.logDir)
		closeFd(&s.fds.criDir)
		return nil
	}
	kf := handover.KeeperFiles{
		Stderr: os.Stderr.Fd(), Lock: s.lock.Fd(), PID1: uintptr(kpidfd),
		Commit: uintptr(take(&s.fds.commitR)), Done: orNoFd(take(&s.fds.done)),
	}
	// PID 1 has its own copies of the log directories: run is done
	// with them.
	closeFd(&s.fds.logDir)
	closeFd(&s.fds.criDir)
	go func() {
		k, err := startLockKeeper(&kf)
		for _, fd := range []uintptr{kf.PID1, kf.Commit, kf.Done} {
			if fd != handover.NoFd {
				unix.Close(int(fd))
			}
		}
		s.keeper = k
		s.keeperDone <- err
	}()
	return nil
}

// joinKeeper waits for the keeper's start, once, and reports how it went.
func (s *podStart) joinKeeper() error {
	if s.keeperDone != nil {
		s.keeperErr = <-s.keeperDone
		s.keeperDone = nil
	}
	return s.keeperErr
}

// setUpCgroups makes the pod's cgroups, names them in the pod directory,
// and moves PID 1 into its own.
func (s *podStart) setUpCgroups() error {
	if err := makePodDirs(s.podDir); err != nil {
		return err
	}
	ancestor, err := s.w.ancestor()
	if err != nil {
		return err
	}
	initCg, machine, err := makeCgroups(s.pod, s.pid, s.podDir, ancestor)
	s.machine = machine
	if err == nil && s.pod.Cgroup != nil {
		err = saveCgroups(s.podDir, s.pod.Cgroup)
	}
	if err != nil {
		if s.pod.Cgroup != nil {
			_ = s.pod.Cgroup.RemoveTree()
		}
		return err
	}
	s.cgroupsMade = s.pod.Cgroup != nil
	// PID 1 has started nothing yet: it reads its configuration, and
	// HostReady, only after this. The move's wait for the kernel (an
	// RCU grace period, docs/design-start.md) is kept short by the
	// waiter's priming.
	if initCg != nil {
		if err := initCg.Add(s.pid); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// setUpHost prepares what PID 1's own root binds and the apps use (the
// pod's files, the empty volumes), the networks, and the configuration's
// last fields.
func (s *podStart) setUpHost() error {
	if err := prepareHost(s.podDir, s.pod); err != nil {
		return err
	}
	if wantsNetworks(s.f.opts.Net) {
		if err := setupNetworks(s.podDir, s.f, s.pid); err != nil {
			return err
		}
		if s.f.opts.MDSToken != "" {
			if err := setMetadataURL(s.podDir, s.pod, s.f.opts.MDSToken); err != nil {
				return err
			}
		}
	}
	// Ours is the host's pid namespace: PID 1 serves its sockets to
	// root peers of it alone, which are rkt's commands on the host.
	var err error
	s.pod.HostPidNS, err = control.OwnPidNamespace()
	return err
}

// sendConfig sends PID 1 its configuration as soon as it is complete (PID
// 1's own root binds the files and directories prepareHost made, and
// everything else PID 1 sets up before HostReady needs only this), then
// records the pod for the entry points and limits the apps' cgroup.
func (s *podStart) sendConfig() error {
	cfg, err := json.Marshal(s.pod)
	if err != nil {
		return fmt.Errorf("encode pod: %w", err)
	}
	// A PID 1 that died before reading it says why in its exit status:
	// the start goes on to HostReady, and to the hand-over, whose
	// waiter then reports that.
	s.sendErr = writeAll(s.fds.configW, cfg)
	if err := recordPod(s.podDir, s.pod, &s.f.opts); err != nil {
		return err
	}
	if s.pod.Cgroup != nil {
		if err := limitApps(s.pod); err != nil {
			return err
		}
		if err := writeSubcgroup(s.podDir, s.pod.Cgroup); err != nil {
			return err
		}
	}
	return nil
}

// writeAll writes b on fd.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// awaitPID1 waits for what PID 1 needs before it may start anything: its
// lock keeper.
func (s *podStart) awaitPID1() error {
	if err := s.joinKeeper(); err != nil {
		return err
	}
	s.machine.Register()
	return nil
}

// handOver names PID 1 in the pid file once it is ready, lets it start
// the apps (HostReady), and hands it over to the waiter (handOverOrWait).
func (s *podStart) handOver() int {
	// PID 1 said it is ready before it read the configuration, so this
	// does not wait on the start path; until then its runtime's
	// defaults would exit on SIGTERM or drop SIGUSR1, so nobody learns
	// its pid, and nothing is passed on to it, before. The pid file is
	// there before HostReady, which PID 1 waits for before it starts an
	// app or says the pod is ready: rkt stop, enter and app add, which
	// read it once the pod is ready, never find it missing.
	waitReady(s.fds.readyR)
	closeFd(&s.fds.readyR)
	pidErr := writePid(s.podDir, s.pid, s.started)
	if pidErr != nil {
		// Without it nobody can stop or enter the pod: PID 1 gets
		// its configuration, and is stopped in order.
		s.req.Raise(sigpolicy.ForceStop, "no pid file")
	}
	if s.sendErr == nil {
		s.sendErr = writeAll(s.fds.configW, []byte(handover.HostReady))
	}
	closeFd(&s.fds.configW)
	if s.sendErr != nil {
		// PID 1 died before reading its configuration; its exit
		// status says why.
		logx.Errorf("send pod configuration: %v", s.sendErr)
	}
	// Opened while PID 1 is surely unreaped (the waiter reaps it only
	// after our report, or our exit): the pidfd names it and nothing
	// else, however late a request comes.
	pidfd, perr := unix.PidfdOpen(s.pid, 0)
	return handOverOrWait(s.w, s.req, s.pid, pidfd, perr, pidErr, s.keeper, s.podDir, s.pod)
}

// fail ends a start that went wrong: PID 1, if cloned, has started nothing
// and is killed once its keeper knows it (PID 1 and the keeper are the
// waiter's children: it reaps them, and exits once both are gone, the
// keeper when PID 1 is). close, deferred, releases the rest.
func (s *podStart) fail(err error) int {
	if s.pid > 0 {
		_ = s.joinKeeper()
		_ = unix.Kill(s.pid, unix.SIGKILL)
	}
	s.fds.closeAll()
	if errors.Is(err, netexec.ErrReported) {
		return status.CodeStage1Failure
	}
	return fail(err)
}

// close releases what the start still holds when it ends other than by a
// hand-over (which exits the process, leaving the rest to the waiter): its
// descriptors; the pod's cgroups, which outlive it, empty, until gc
// removes them (the gc entry point, rkt gc and rkt rm), as rkt's stage1
// leaves its pod's: rkt's tests look for them between the run and the gc.
// Nothing of the pod may outlive the lock, though: whatever PID 1 could
// not end (it was killed) is killed here first. And the app directory's
// bind.
func (s *podStart) close() {
	s.fds.closeAll()
	if s.cgroupsMade {
		if err := s.pod.Cgroup.Drain(); err != nil {
			logx.Warnf("empty cgroups: %v", err)
		}
	}
	if s.undoBind != nil {
		s.undoBind()
	}
}
