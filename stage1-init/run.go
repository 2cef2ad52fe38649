package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/status"
)

// fail prints the one line a setup failure gets and returns rkt's stage1
// failure code.
func fail(err error) int {
	fmt.Fprintf(os.Stderr, "stage1: %v\n", err)
	return status.CodeStage1Failure
}

// runMain is the run entry point (contract §2-§4). It validates everything
// before it changes anything, then clones the pod's PID 1 into new
// namespaces and stays outside them, holding the lock, until PID 1 has
// been reaped: by then the kernel has killed and reaped every other process
// of the pod's pid namespace and PID 1 has written every status, so the
// lock is released only when the pod is really over.
func runMain(args []string) int {
	// Registered first: a stop request that arrives while we set up
	// must not kill us before PID 1 exists.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1)

	f, err := parseRunFlags(args)
	if err != nil {
		return fail(err)
	}
	podDir, err := os.Getwd()
	if err != nil {
		return fail(fmt.Errorf("pod directory: %w", err))
	}
	lock, err := takeLockFD(os.Getenv("RKT_LOCK_FD"), podDir)
	if err != nil {
		return fail(err)
	}
	defer runtime.KeepAlive(lock)
	if err := closeOnExecFrom3(); err != nil {
		return fail(fmt.Errorf("close_range: %w", err))
	}
	pod, err := podspec.Load(podDir, &f.opts)
	if err != nil {
		return fail(err)
	}
	if err := checkIsolation(pod); err != nil {
		return fail(err)
	}
	warnIsolation(pod, f)
	statusDir, err := status.OpenDir(filepath.Join(podDir, layout.StatusDir))
	if err != nil {
		return fail(fmt.Errorf("status directory: %w", err))
	}
	defer statusDir.Close()
	for _, n := range f.opts.Net {
		if n != "host" && n != "none" {
			fmt.Fprintf(os.Stderr, "stage1: warning: --net=%s: CNI networks are not supported yet, the pod gets loopback only\n", f.net)
			break
		}
	}
	if f.opts.MDSToken != "" {
		fmt.Fprintln(os.Stderr, "stage1: warning: --mds-token: the metadata service is not supported, AC_METADATA_URL is not set")
	}
	return superviseInit(pod, f, podDir, sigs)
}

// prepareHost creates what the apps' mounts need in the pod directory.
func prepareHost(podDir string, pod *podspec.Pod, opts *podspec.Options) error {
	d, err := status.OpenDir(filepath.Join(podDir, layout.RktDir))
	if err != nil {
		return fmt.Errorf("stage1 rkt directory: %w", err)
	}
	defer d.Close()
	if err := d.WriteFile(filepath.Base(layout.HostsFile), podspec.HostsContent(pod.Hostname)); err != nil {
		return fmt.Errorf("write hosts file: %w", err)
	}
	for _, v := range pod.EmptyVolumes {
		if err := v.Create(podDir); err != nil {
			return err
		}
	}
	if err := writeSpecs(podDir, pod.Apps); err != nil {
		return err
	}
	return saveOptions(podDir, opts)
}

// writeSpecs saves each app's resolved spec, so that enter builds its
// process from exactly what the app got.
func writeSpecs(podDir string, apps []podspec.App) error {
	for _, dir := range []string{layout.Pod1Dir, layout.AppSpecDir} {
		if err := os.Mkdir(filepath.Join(podDir, dir), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	d, err := status.OpenDir(filepath.Join(podDir, layout.AppSpecDir))
	if err != nil {
		return fmt.Errorf("open %s: %w", layout.AppSpecDir, err)
	}
	defer d.Close()
	for i := range apps {
		b, err := json.Marshal(&apps[i].Spec)
		if err != nil {
			return err
		}
		if err := d.WriteFile(apps[i].Spec.App+".json", b); err != nil {
			return fmt.Errorf("app %q: save spec: %w", apps[i].Spec.App, err)
		}
	}
	return nil
}

// makeCgroups creates the pod's cgroup below ours, and in it the one PID 1
// lives in (apps get their own, siblings of it). subcgroup is written
// before pid, as the contract asks. Without a usable hierarchy the pod runs
// without cgroups, with a warning.
func makeCgroups(podDir string, pod *podspec.Pod) (*cgroups.Group, error) {
	self, err := cgroups.Current()
	if err != nil {
		fmt.Fprintf(os.Stderr, "stage1: warning: %v; apps get no cgroups\n", err)
		return nil, nil
	}
	pg, err := self.NewChild("pod1-" + pod.UUID)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("UUID %s: %w: a pod with this UUID is running, or was killed and not yet collected by gc", pod.UUID, err)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "stage1: warning: %v; apps get no cgroups\n", err)
		return nil, nil
	}
	pod.Cgroup = pg
	b, err := json.Marshal(pg)
	if err != nil {
		return nil, err
	}
	if err := status.WriteFileIn(filepath.Join(podDir, layout.Pod1Dir), filepath.Base(layout.CgroupsFile), b); err != nil {
		return nil, fmt.Errorf("save cgroups: %w", err)
	}
	if err := status.WriteFileIn(podDir, layout.Subcgroup, []byte(pg.Path()+"\n")); err != nil {
		return nil, fmt.Errorf("write subcgroup: %w", err)
	}
	return pg.Child("stage1")
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

func superviseInit(pod *podspec.Pod, f *runFlags, podDir string, sigs chan os.Signal) int {
	if pod.Mutable {
		// Before PID 1 is cloned: its mount namespace copies this.
		undo, err := shareStage2(podDir)
		if err != nil {
			return fail(err)
		}
		defer undo()
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	// PID 1 is started first, and the pod directory, the cgroups and
	// the pid file are prepared while its runtime starts: it does
	// nothing before it has read its configuration, which is sent only
	// once all that is done and PID 1 is in its cgroup. Started last,
	// its start-up (3-5 ms) came after ours on the pod's start path
	// (docs/benchmarks.md).
	//
	// PR_SET_PDEATHSIG fires when the thread that cloned PID 1 exits, not
	// the process: this goroutine keeps its thread until we return.
	runtime.LockOSThread()
	// syscall.ForkExec, not os.StartProcess: the latter's first call in a
	// process forks and reaps a throwaway child to probe clone(CLONE_PIDFD)
	// (os.checkPidfd), a whole fork+exit+wait on the pod's start path
	// (0.5-4 ms measured; docs/benchmarks.md) for a pidfd we never use.
	pid, err := syscall.ForkExec("/proc/self/exe", []string{roleInit}, &syscall.ProcAttr{
		Dir:   podDir,
		Env:   os.Environ(),
		Files: []uintptr{os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd(), pr.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags: cloneFlags(f),
			// If we are killed, PID 1 dies with us and the kernel
			// kills the rest of the pod: no pod process outlives
			// the lock by more than that.
			Pdeathsig: unix.SIGKILL,
		},
	})
	pr.Close()
	if err != nil {
		pw.Close()
		return fail(fmt.Errorf("start pod init: %w", err))
	}
	// abort ends PID 1, which has started nothing yet, and fails.
	abort := func(err error) int {
		_ = unix.Kill(pid, unix.SIGKILL)
		waitPid(pid)
		pw.Close()
		return fail(err)
	}
	if err := prepareHost(podDir, pod, &f.opts); err != nil {
		return abort(err)
	}
	initCg, err := makeCgroups(podDir, pod)
	if err != nil {
		return abort(err)
	}
	if pod.Cgroup != nil {
		defer func() {
			// PID 1 removed the apps' cgroups and is gone from its
			// own: two rmdirs per hierarchy, unless something was
			// left (PID 1 killed), which RemoveTree kills and walks.
			if initCg != nil && initCg.RemoveEmpty() == nil && pod.Cgroup.RemoveEmpty() == nil {
				return
			}
			if err := pod.Cgroup.RemoveTree(); err != nil {
				fmt.Fprintf(os.Stderr, "stage1: remove cgroups: %v\n", err)
			}
		}()
	}
	cfg, err := json.Marshal(pod)
	if err != nil {
		return abort(fmt.Errorf("encode pod: %w", err))
	}
	if initCg != nil {
		// PID 1 waits for its configuration, so it is in its cgroup
		// before it starts anything.
		if err := initCg.Add(pid); err != nil {
			fmt.Fprintf(os.Stderr, "stage1: warning: %v\n", err)
		}
	}
	if err := writePid(podDir, pid); err != nil {
		return abort(err)
	}
	_, werr := pw.Write(cfg)
	pw.Close()
	if werr != nil {
		// PID 1 died before reading its configuration; its exit
		// status says why.
		fmt.Fprintf(os.Stderr, "stage1: send pod configuration: %v\n", werr)
	}
	go forwardStop(sigs, pid)
	time.AfterFunc(shedDelay, shedUnusedMemory)
	ws := waitPid(pid)
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		fmt.Fprintf(os.Stderr, "stage1: pod init killed by signal %v\n", ws.Signal())
		return status.CodeStage1Failure
	}
	return status.CodeStage1Failure
}

// forwardStop turns a stop request to the run process (rkt run being
// interrupted, or a signal sent to the pid stage0 exec'd) into a stop of
// the pod: SIGUSR1 forced, anything else graceful.
func forwardStop(sigs chan os.Signal, pid int) {
	for sig := range sigs {
		if sig == unix.SIGUSR1 {
			_ = unix.Kill(pid, unix.SIGUSR1)
			continue
		}
		_ = unix.Kill(pid, unix.SIGTERM)
	}
}

// waitPid waits for our only child. The run process starts no other
// child, so this is not a second reaper competing with one.
func waitPid(pid int) unix.WaitStatus {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			return ws
		}
	}
}

// writePid names PID 1 for rkt enter and the host tools (contract §4),
// atomically, unlike rkt's own stage1.
func writePid(podDir string, pid int) error {
	if err := status.WriteFileIn(podDir, layout.Pid, []byte(strconv.Itoa(pid)+"\n")); err != nil {
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
