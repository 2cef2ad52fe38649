package podstart

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/console"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/machined"
	"github.com/pod1/pod1/podjournal"
	"github.com/pod1/pod1/podlog"
	"github.com/pod1/pod1/podpid"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/sigpolicy"
	"github.com/pod1/pod1/sockact"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/starttricks"
	"github.com/pod1/pod1/status"
)

// runMain is the pod's set-up, which the run entry point (contract §2-§4),
// the waiter (waiter/waiter.c), starts as its child. It validates
// everything before it changes anything, then clones the pod's PID 1 into
// new namespaces, and the lock keeper, both as the waiter's children, and
// hands them over to the waiter once PID 1 is ready: the waiter holds the
// lock and passes stop requests on until PID 1 has been reaped.
func runMain(args []string) int {
	// The pod's start, as rkt list and rkt status show it (the pid
	// file's mtime, podpid.Write).
	started := time.Now()
	// Installed first: a stop request that arrives while we set up
	// must not kill us before PID 1 exists; it is kept and passed on
	// once PID 1 can act on it.
	req := sigpolicy.Listen()

	// The waiter, our parent, is the process rkt exec'd, which systemd
	// passed its sockets to: they are taken before we open anything.
	passed, err := sockact.Take(os.Getppid())
	if err != nil {
		return fail(err)
	}
	// Only the waiter holds the lock and passes stop signals on for the
	// pod's whole life; without it nothing would, once we hand over.
	w, err := takeWaiter()
	if err != nil {
		return fail(err)
	}
	tricks, err := starttricks.TakeEnv()
	if err != nil {
		return fail(err)
	}
	logx.Debugf("%s", tricks)
	f, err := parseRunFlags(args)
	if err != nil {
		return fail(err)
	}
	f.opts.Console = f.opts.Interactive && console.IsTerminal(0)
	podDir, err := os.Getwd()
	if err != nil {
		return fail(fmt.Errorf("pod directory: %w", err))
	}
	lock, err := takeLockFD(os.Getenv("RKT_LOCK_FD"), podDir)
	if err != nil {
		return fail(err)
	}
	defer runtime.KeepAlive(lock)
	if err := handover.CloseOnExecFrom3(); err != nil {
		return fail(fmt.Errorf("close_range: %w", err))
	}
	if strings.Trim(f.opts.MDSToken, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" || len(f.opts.MDSToken) > 256 {
		return fail(errors.New("--mds-token: want letters, digits, '-', '_' and '.' only, at most 256"))
	}
	if err := checkPodTree(podDir); err != nil {
		return fail(err)
	}
	pod, err := podspec.Load(podDir, &f.opts)
	if err != nil {
		return fail(err)
	}
	if err := checkIsolation(pod); err != nil {
		return fail(err)
	}
	if err := sockact.Match(passed, pod, f.opts.PrivateUsers != nil); err != nil {
		return fail(err)
	}
	warnIsolation(pod, f)
	statusDir, err := status.OpenDir(filepath.Join(podDir, layout.StatusDir))
	if err != nil {
		return fail(fmt.Errorf("status directory: %w", err))
	}
	defer statusDir.Close()
	if f.opts.MDSToken != "" && !f.opts.NetHost() && !wantsNetworks(f.opts.Net) {
		logx.Warnf("--mds-token: with --net=none the apps cannot reach the metadata service; AC_METADATA_URL is not set")
	}
	return cloneInitAndHandOver(&podStart{pod: pod, f: f, podDir: podDir, lock: lock, req: req, w: w, started: started})
}

// makePodDirs makes the directories of the pod directory that run, PID 1
// and app operations write in.
func makePodDirs(podDir string) error {
	for _, dir := range []string{layout.Pod1Dir, layout.AppSpecDir} {
		if err := os.Mkdir(filepath.Join(podDir, dir), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	return nil
}

// prepareHost creates what the apps' mounts and PID 1's own root need in
// the pod directory, before PID 1 gets its configuration: the hosts and
// hostname files and the empty volumes.
func prepareHost(podDir string, pod *podspec.Pod) error {
	d, err := safefile.OpenDir(filepath.Join(podDir, layout.RktDir))
	if err != nil {
		return fmt.Errorf("stage1 rkt directory: %w", err)
	}
	defer d.Close()
	if err := d.WriteFile(filepath.Base(layout.HostsFile), podspec.HostsContent(pod.Hostname), 0o644, safefile.Volatile); err != nil {
		return fmt.Errorf("write hosts file: %w", err)
	}
	if err := d.WriteFile(filepath.Base(layout.HostnameFile), []byte(pod.Hostname+"\n"), 0o644, safefile.Volatile); err != nil {
		return fmt.Errorf("write hostname file: %w", err)
	}
	for _, v := range pod.EmptyVolumes {
		if err := v.Create(podDir); err != nil {
			return err
		}
	}
	return nil
}

// recordPod saves what enter and app operations read of the pod (each
// app's spec, the run's options) while PID 1 sets itself up: they read
// it once the pid file names PID 1, written after handover.HostReady.
func recordPod(podDir string, pod *podspec.Pod, opts *podspec.Options) error {
	if err := writeSpecs(podDir, pod.Apps); err != nil {
		return err
	}
	return saveOptions(podDir, opts)
}

// writeSpecs saves each app's resolved spec, so that enter builds its
// process from exactly what the app got.
func writeSpecs(podDir string, apps []podspec.App) error {
	d, err := safefile.OpenDir(filepath.Join(podDir, layout.AppSpecDir))
	if err != nil {
		return fmt.Errorf("open %s: %w", layout.AppSpecDir, err)
	}
	defer d.Close()
	for i := range apps {
		b, err := json.Marshal(&apps[i].Spec)
		if err != nil {
			return err
		}
		if err := d.WriteFile(apps[i].Spec.Name+".json", b, 0o644, safefile.Volatile); err != nil {
			return fmt.Errorf("app %q: save spec: %w", apps[i].Spec.Name, err)
		}
	}
	return nil
}

// makeCgroups creates the pod's cgroup (machined.NewPod places it, and
// registers the pod with systemd-machined where it runs) and
// makes in it the one PID 1 lives in (apps get their own, siblings of it);
// limitApps limits the number of their tasks. The apps' device allow-list
// and limits live in cgroups:
// a host where the pod cannot have them, or the controllers they need,
// gets a one-line error before any app starts.
func makeCgroups(pod *podspec.Pod, pid int, podDir string, ancestor int) (*cgroups.Group, *machined.Pending, error) {
	need := map[string]bool{}
	if pod.PidsMax != 0 {
		need["pids"] = true
	}
	for _, a := range pod.Apps {
		if a.Supervision.PidsMax != 0 {
			need["pids"] = true
		}
		for _, c := range a.Resources.Controllers() {
			need[c] = true
		}
	}
	var needs []string
	for _, c := range []string{"pids", "memory", "cpu"} {
		if need[c] {
			needs = append(needs, c)
		}
	}
	// ancestor, the waiter, is the process rkt exec'd: a unit whose
	// every process descends from it gets the pod inside it.
	pg, machine, err := machined.NewPod(machined.Pod{UUID: pod.UUID, Leader: pid, Root: filepath.Join(podDir, layout.Stage1RootFS)},
		cgroups.PodName(pod.UUID), handover.Stage1Cgroup, needs, ancestor, pod.Machined)
	if errors.Is(err, os.ErrExist) {
		return nil, nil, fmt.Errorf("UUID %s: %w: a pod with this UUID is running, or was killed and not yet collected by gc", pod.UUID, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cgroup: %w", err)
	}
	pod.Cgroup = pg
	// The apps live in one cgroup, which the pod's pids.max is put on:
	// PID 1 (a Go program, which dies when it cannot make a thread) is
	// outside it, so fork-bombing apps cannot take it down.
	if _, err := pg.Child(cgroups.AppsName); err != nil {
		return nil, nil, fmt.Errorf("cgroup: %w", err)
	}
	// On a unified host PID 1 makes the apps' cgroup namespace in it
	// first, then hands these down (podplan.Pod.AppsControllers).
	pod.AppsControllers = needs
	initCg, err := pg.Child(handover.Stage1Cgroup)
	return initCg, machine, err
}

// limitApps puts the pod's pids.max on the apps' cgroup. It is called
// after PID 1 has its configuration, which does not need it, and before
// handover.HostReady, which no app starts before: the host's maximum is read from
// three files and the mount table, off the start's critical path.
func limitApps(pod *podspec.Pod) error {
	n := pod.PidsMax
	if n < 0 {
		n = cgroups.DefaultPodPidsMax()
	}
	if n <= 0 {
		return nil
	}
	if err := pod.Cgroup.Sub(cgroups.AppsName).SetPidsMax(n); err != nil {
		return fmt.Errorf("cgroup: the pod's pids.max: %w", err)
	}
	return nil
}

// saveCgroups names the pod's cgroups in the pod directory, for the host
// side (gc, status) and rkt's readers, as soon as they exist: gc removes
// those of a run killed at any later step.
func saveCgroups(podDir string, pg *cgroups.Group) error {
	b, err := json.Marshal(pg)
	if err != nil {
		return err
	}
	if err := safefile.WriteIn(filepath.Join(podDir, layout.Pod1Dir), filepath.Base(layout.CgroupsFile), b, 0o644, safefile.Volatile); err != nil {
		return fmt.Errorf("save cgroups: %w", err)
	}
	return nil
}

// writeSubcgroup names the pod's cgroup, relative to its hierarchy's root,
// for rkt's readers (the API service), before the pid file (contract §4).
// gc needs only saveCgroups' file, so this waits until PID 1 has its
// configuration: the path is worked out from the mount table.
func writeSubcgroup(podDir string, pg *cgroups.Group) error {
	// No newline: rkt's stage1 writes the bare path, and rkt's readers
	// (the API service, gc) take the file's content as it is.
	if err := safefile.WriteIn(podDir, layout.Subcgroup, []byte(pg.Path()), 0o644, safefile.Volatile); err != nil {
		return fmt.Errorf("write subcgroup: %w", err)
	}
	return nil
}

func cloneFlags(f *runFlags) uintptr {
	fl := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS)
	if f.opts.IPC != "parent" {
		fl |= unix.CLONE_NEWIPC
	}
	if !f.opts.NetHost() {
		fl |= unix.CLONE_NEWNET
	}
	return fl
}

// handOverOrWait is the start's end (podStart.handOver): once PID 1 is ready and
// named in the pid file, the waiter takes over (waiter.handOver) and we
// exit at once, leaving what is left to undo to it. If the pid file could
// not be written, or the waiter is gone (PID 1 then stops the pod: its
// parent died), we pass our stop requests on, wait for PID 1 to end and
// fail, undoing what we made.
func handOverOrWait(w *waiter, req *sigpolicy.Requests, pid, pidfd int, perr, pidErr error, keeper int, podDir string, pod *podspec.Pod) int {
	if pidErr == nil && perr == nil {
		err := w.handOver(pid, keeper, podDir, pod)
		if err == nil {
			os.Exit(0)
		}
		logx.Errorf("hand-over to the waiter: %v", err)
	}
	go forwardStop(req, pid, pidfd, perr)
	if perr == nil {
		waitGone(pidfd)
	}
	if pidErr != nil {
		return fail(pidErr)
	}
	return status.CodeStage1Failure
}

// forwardStop passes each stop request that reaches us, when we could not
// hand PID 1 over to the waiter, on to PID 1, at the level it has reached
// (sigpolicy.Forward), including those that arrived before PID 1 existed.
// It signals through pidfd (unless pidfdErr), so a request that comes
// after the waiter has reaped PID 1 never reaches a process that took its
// pid.
func forwardStop(req *sigpolicy.Requests, pid, pidfd int, pidfdErr error) {
	for range req.C {
		sig := sigpolicy.Forward(req.Level())
		if pidfdErr == nil {
			_ = unix.PidfdSendSignal(pidfd, sig, nil, 0)
		} else {
			_ = unix.Kill(pid, sig)
		}
	}
}

// writePid names PID 1 for rkt enter and the host tools (contract §4),
// atomically, unlike rkt's own stage1, with the pod's start as its mtime.
func writePid(podDir string, pid int, started time.Time) error {
	if err := podpid.Write(podDir, pid, started); err != nil {
		return fmt.Errorf("write pid: %w", err)
	}
	return nil
}

// shareStage2 makes the pod's app directory (stage1/rootfs/opt/stage2) a
// shared mount in the host's mount namespace before PID 1 is cloned. The
// app rootfs that stage0 mounts there for an app added later (rkt app
// add) then propagates into the pod's mount namespace, which is a slave of
// the host's; without it that only happens on hosts whose / is shared
// (systemd's default, but not everyone's). The bind is undone when the pod
// ends, or by gc, which unmounts everything left under a pod.
func shareStage2(podDir string) (func(), error) {
	dir := filepath.Join(podDir, layout.Stage2Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create opt/stage2: %w", err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("bind opt/stage2: %w", err)
	}
	undo := func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		undo()
		return nil, fmt.Errorf("share opt/stage2: %w", err)
	}
	return undo, nil
}

// openLogSinks decides where the apps' output lines go (the journal when
// it listens, else files in the pod's log directory, plus the CRI log
// files of a k8s-plain pod, plus the pod's own journal) and opens the
// directories PID 1 writes in, so it needs no path to them. It returns
// their fds for PID 1's handover.LogDirFd, CRIDirFd and JournalDirFd.
func openLogSinks(podDir string, pod *podspec.Pod) ([3]uintptr, error) {
	fds := [3]uintptr{handover.NoFd, handover.NoFd, handover.NoFd}
	logged := pod.Mutable
	for _, a := range pod.Apps {
		logged = logged || a.Stdio.Stdout == podspec.StdioLog || a.Stdio.Stderr == podspec.StdioLog
	}
	if !logged {
		return fds, nil
	}
	pod.Logs.Journal = podlog.JournalEnabled()
	if !pod.Logs.Journal {
		dir := filepath.Join(podDir, layout.LogDir)
		if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
			return fds, fmt.Errorf("log directory: %w", err)
		}
		fd, err := detachedDir(dir, unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return fds, fmt.Errorf("log directory: %w", err)
		}
		fds[0] = uintptr(fd)
		pod.Logs.Files = true
	}
	if pod.CRIDir != "" {
		fd, err := detachedDir(pod.CRIDir, 0)
		if err != nil {
			closeFds(fds[:])
			return fds, fmt.Errorf("pod manifest: annotations: annotation %s: %w", podspec.AnnKubernetesDir, err)
		}
		fds[1] = uintptr(fd)
	}
	if pod.PodJournal == podspec.PodJournalYes || pod.PodJournal == podspec.PodJournalAuto && machined.Booted() {
		boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			closeFds(fds[:])
			return fds, fmt.Errorf("pod journal: %w", err)
		}
		fd, err := podjournal.Prepare(podDir, pod.UUID)
		if err != nil {
			closeFds(fds[:])
			return fds, err
		}
		fds[2] = uintptr(fd)
		pod.Logs.PodJournal = true
		pod.Logs.BootID = strings.TrimSpace(string(boot))
		// As rkt's stage1: journalctl -m reads the pod's lines with
		// the host's, also once the pod is over, until gc. A link
		// that cannot be made costs only that.
		if _, err := podjournal.Link(layout.HostJournalDir, podDir, pod.UUID); err != nil {
			logx.Warnf("%v", err)
		}
	}
	return fds, nil
}

// detachedDir returns an O_PATH descriptor of a detached copy of the
// directory dir (a bind mount of it attached nowhere): files are made
// through it as through the directory, but ".." from it leads nowhere, so
// PID 1 holding it holds nothing else of the host (enterOwnRoot), even for
// whoever may follow /proc/1/fd.
func detachedDir(dir string, flags uint) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|flags)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: not a directory", dir)
	}
	return fd, nil
}
