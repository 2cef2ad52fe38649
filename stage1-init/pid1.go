package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podenv"
	"github.com/pod1/pod1/podlog"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/sigpolicy"
	"github.com/pod1/pod1/status"
)

// initMain is the pod's PID 1. Before the first app starts, any error ends
// the pod with 254; after that PID 1 never dies on an error: it logs, stops
// the apps in order and exits with the pod's code (catatonit's rule).
func initMain() int {
	// The signal table first: until it is in, the Go runtime's defaults
	// would make a SIGTERM exit 2 and drop a SIGUSR1 (threats T20).
	// Exits need no registration: the reaper's watcher (reaper.Exited,
	// started by the loop) sees a child that exited at any time before,
	// as a zombie waiting for us, so none can be missed (dumb-init #104);
	// SIGCHLD is not used.
	req := sigpolicy.Listen()
	if err := takeHandover(req); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	rp := reaper.New()
	code := runPodInit(req, rp)
	killAndReapAll(rp)
	return code
}

// killAndReapAll makes sure nothing of the pod outlives PID 1, whatever
// path ends it: the lock (held for PID 1 by the lock keeper) is released
// only when it exits, and when that happens nothing else may be left.
func killAndReapAll(rp *reaper.Reaper) {
	_ = unix.Kill(-1, unix.SIGKILL)
	rp.WaitAll()
}

// runPodInit sets the pod up, starts the apps and supervises them until the
// pod is over, and returns the pod's exit code.
func runPodInit(req *sigpolicy.Requests, rp *reaper.Reaper) int {
	// Nothing in the pod may ptrace PID 1 or read its /proc/1/root,
	// /proc/1/fd, /proc/1/environ (CVE-2016-9962, threats T2, T4).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("pod init: prctl dumpable: %w", err))
	}
	// Before the configuration: its Go start-up then overlaps run's
	// preparation.
	sp := startSpare(rp)
	pod, err := readPodConfig()
	if err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	if err := podenv.Setup(pod.Hostname, pod.NewNet, pod.PrivateUsers); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	if err := enterOwnRoot(pod); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	dir, err := status.OpenDir(layout.StatusDir)
	if err != nil {
		return fail(fmt.Errorf("pod init: status directory: %w", err))
	}
	s := newSupervisor(pod, dir, rp)
	s.spare = sp
	s.req = req
	if s.devNull, err = unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return fail(fmt.Errorf("pod init: %w", err))
	}
	s.logs = newForwarder(pod)
	s.logs.OnJournalError(func(err error) {
		s.logf("journal: %v (lines it refuses are counted in the apps' records as logDropped)", err)
	})
	defer s.recoverPanic()
	if pod.Mutable {
		// App operations come over the control socket; it is up
		// before the pod says it is ready for them.
		s.calls = make(chan *control.Call)
		closeCtl, err := control.Serve(s.calls, s.logf)
		if err != nil {
			return fail(fmt.Errorf("pod init: %w", err))
		}
		defer closeCtl()
	}
	s.startAll()
	s.dropSpare()
	if err := markReady(); err != nil {
		s.logf("supervisor-status: %v", err)
	}
	time.AfterFunc(shedDelay, shedUnusedMemory)
	return s.loop()
}

func readPodConfig() (*podspec.Pod, error) {
	f := os.NewFile(podConfigFd, "pod-config")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4*podspec.MaxManifestSize))
	if err != nil {
		return nil, fmt.Errorf("read pod configuration: %w", err)
	}
	var p podspec.Pod
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("decode pod configuration: %w", err)
	}
	return &p, nil
}

// markReady writes rkt/supervisor-status -> "ready" (contract §4) as a
// symlink made under a temporary name and renamed into place.
func markReady() error {
	const dir = layout.RktDir
	tmp := dir + "/.supervisor-status.tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink("ready", tmp); err != nil {
		return err
	}
	return os.Rename(tmp, layout.SupervisorStatus)
}

// recoverPanic turns a panic in the supervisor into the same orderly end as
// any other failure after the apps started: every pod process killed and
// reaped, the statuses that are known written, exit 254 (threats FI-14).
func (s *supervisor) recoverPanic() {
	r := recover()
	if r == nil {
		return
	}
	logx.Errorf("pod init panic: %v", r)
	_, _ = logx.Writer().Write(debug.Stack())
	_ = unix.Kill(-1, unix.SIGKILL)
	for _, e := range s.reaper.WaitAll() {
		a, ok := e.Tag.(*app)
		if ok && a.state != stateDone {
			_ = s.dir.Write(a.name, status.FromWaitStatus(e.Status))
		}
	}
	os.Exit(status.CodeStage1Failure)
}

func (s *supervisor) logf(format string, a ...any) { logx.Warnf(format, a...) }

func (s *supervisor) debugf(format string, a ...any) { logx.Debugf(format, a...) }

// loop runs until the pod is over: every app finished (and, for a mutable
// pod, a stop requested). Then nothing may remain: leftovers are killed
// and reaped, and the cgroups removed, before PID 1 exits and the lock can
// be released.
func (s *supervisor) loop() int {
	// Woken by the reaper's watcher at each exit, and by a periodic sweep
	// as well: cheap insurance against a lost wake-up (containerd
	// #12678), and what reaps an orphan re-parented to us while we have
	// no child of our own (see reaper.Exited).
	exited := s.reaper.Exited()
	sweep := time.NewTicker(time.Second)
	defer sweep.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Handling an exit can reap others (cleanCgroup reaps while it
		// empties the app's cgroup), which it appends to s.pending: take
		// the batch first, so those are handled next time round and
		// never dropped.
		exits := s.pending
		s.pending = nil
		s.handle(exits)
		next := s.tick(time.Now())
		if s.finished() {
			break
		}
		if len(s.pending) > 0 {
			continue
		}
		timer.Reset(time.Until(next))
		if next.IsZero() {
			timer.Stop()
		}
		select {
		case <-exited:
			s.pending = append(s.pending, s.reaper.Reap()...)
		case <-s.req.C:
			s.actOnRequest()
		case c := <-s.calls:
			s.handleCall(c)
			// App operations are rare and leave garbage (manifests
			// parsed, specs decoded) and map in code the loop does not
			// use: give both back now so PID 1 stays small in a
			// long-lived pod.
			shedUnusedMemory()
		case <-timer.C:
		case <-sweep.C:
			s.pending = append(s.pending, s.reaper.Reap()...)
		}
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	s.handle(s.reaper.WaitAll())
	for _, a := range s.apps {
		if a.cg != nil {
			_ = a.cg.Remove()
		}
	}
	// Every writer is gone: the pipes hold the apps' last lines, which
	// are carried before the lock is released. The records then get the
	// final count of lines the sinks could not take.
	s.logs.Close(logDrainTimeout)
	for _, a := range s.apps {
		if a.rec.LogDropped != s.logs.Dropped(a.name) {
			s.writeRecord(a)
		}
	}
	return s.podCode
}

// logDrainTimeout bounds the wait for the last lines at the pod's end: a
// console nobody reads or a slow journal must not keep the pod (and its
// lock) alive for long; a journal that takes nothing is given up on sooner
// (podlog).
const logDrainTimeout = 5 * time.Second

func newForwarder(pod *podspec.Pod) *podlog.Forwarder {
	dir, cri := -1, -1
	if pod.Logs.Files {
		dir = logDirFd
	}
	if pod.CRIDir != "" {
		cri = criDirFd
	}
	return podlog.New(pod.UUID, pod.Logs.Journal, dir, cri)
}

func (s *supervisor) handle(exits []reaper.Exit) {
	for _, e := range exits {
		if _, ok := e.Tag.(*app); ok {
			s.onExit(e)
		}
	}
}
