package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// Every exit code 0..255 lands exactly in the status file and in the exit
// code of run (hence of rkt run).
func TestExitCodesRecordedExactly(t *testing.T) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for code := 0; code < 256; code++ {
		wg.Add(1)
		go func(code int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(fmt.Sprint(code), func(t *testing.T) {
				p := newPod(t, []App{{Name: "app", Exec: probe("exit", fmt.Sprint(code))}}, nil)
				r := runPod(t, p, RunOpts{})
				if r.Code != code {
					t.Errorf("run exited %d, want %d; stderr %s", r.Code, code, r.Stderr)
				}
				if got := p.Status(t, "app"); got != code {
					t.Errorf("status %d, want %d", got, code)
				}
			})
		}(code)
	}
	wg.Wait()
}

func TestSignalDeathsRecordedAs128PlusSignal(t *testing.T) {
	for _, sig := range []unix.Signal{unix.SIGKILL, unix.SIGTERM, unix.SIGHUP, unix.SIGUSR1, unix.SIGINT} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			p := newPod(t, []App{{Name: "app", Exec: probe("kill-self", fmt.Sprint(int(sig)))}}, nil)
			r := runPod(t, p, RunOpts{})
			want := 128 + int(sig)
			if got := p.Status(t, "app"); got != want {
				t.Fatalf("status %d, want %d; stderr %s", got, want, r.Stderr)
			}
			if r.Code != want {
				t.Fatalf("pod exit %d, want %d", r.Code, want)
			}
		})
	}
}

// rkt's rule: the first app to fail stops the others, its code is the pod's.
func TestFirstFailureStopsOthersAndIsThePodCode(t *testing.T) {
	p := newPod(t, []App{
		{Name: "ok", Exec: probe("exit", "0")},
		{Name: "failing", Exec: probe("sleep", "200ms", "+", "exit", "3")},
		{Name: "long", Exec: probe("sleep", "1h")},
		{Name: "later", Exec: probe("sleep", "400ms", "+", "exit", "5")},
	}, nil)
	t0 := time.Now()
	// A long app that was not stopped keeps the pod alive: runPod's event
	// deadline fails the test then. One stopped only at the end of its
	// grace period shows as 137 below, not 143.
	r := runPod(t, p, RunOpts{})
	if r.Code != 3 {
		t.Fatalf("pod exit %d, want 3; stderr %s", r.Code, r.Stderr)
	}
	t.Logf("the pod ended in %v", time.Since(t0))
	// The apps the pod stopped record 0 in the status file, as rkt's
	// stage1 records them (rkt's TestExitCodeWithSeveralApps); their
	// records keep the SIGTERM that ended them.
	want := map[string]int{"ok": 0, "failing": 3, "long": 0, "later": 0}
	for app, code := range want {
		if got := p.Status(t, app); got != code {
			t.Errorf("app %s: status %d, want %d", app, got, code)
		}
		rec, err := status.ReadRecord(p.statusDir(), app)
		if err != nil {
			t.Fatal(err)
		}
		stopped := app == "long" || app == "later"
		if stopped && (rec.ExitCode == nil || *rec.ExitCode != 143 || rec.Signal != "SIGTERM" || !rec.StoppedByPod) ||
			!stopped && (rec.StoppedByPod || rec.StatusCode != nil) {
			t.Errorf("app %s: record %+v", app, rec)
		}
	}
}

func TestPodWithAllAppsSucceedingExitsZero(t *testing.T) {
	p := newPod(t, []App{
		{Name: "a", Exec: probe("exit", "0")},
		{Name: "b", Exec: probe("sleep", "100ms")},
	}, nil)
	if r := runPod(t, p, RunOpts{}); r.Code != 0 {
		t.Fatalf("pod exit %d; stderr %s", r.Code, r.Stderr)
	}
	if p.Status(t, "a") != 0 || p.Status(t, "b") != 0 {
		t.Fatal("statuses not 0")
	}
}

// SIGTERM to the run process (what rkt stop's fallback and an interrupted
// rkt run do) stops the pod gracefully: apps get SIGTERM, statuses are
// written, run exits with the first failure before the stop (none: 0).
func TestSIGTERMToRunStopsThePod(t *testing.T) {
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			want := 143
			if sig == unix.SIGUSR1 {
				want = 137 // forced: killed at once
			}
			p := newPod(t, []App{
				{Name: "a", Exec: probe("sleep", "1h")},
				{Name: "b", Exec: probe("sleep", "1h")},
			}, nil)
			r := start(t, p, RunOpts{})
			podPid(t, p)
			waitSupervisorReady(t, p)
			must(t, r.Cmd.Process.Signal(sig))
			if code := r.Wait(t); code != 0 {
				t.Fatalf("pod exit %d; stderr %s", code, r.Stderr)
			}
			for _, a := range []string{"a", "b"} {
				if got := p.Status(t, a); got != want {
					t.Errorf("app %s: status %d, want %d", a, got, want)
				}
			}
		})
	}
}

// T-FD-1/2: apps see exactly fds 0, 1, 2 even when stage0 leaves 50 extra
// inheritable fds open (among them the lock and a directory on /).
func TestAppsSeeOnlyStdio(t *testing.T) {
	var extra []*os.File
	root, err := os.Open("/")
	must(t, err)
	extra = append(extra, root)
	for i := 0; i < 49; i++ {
		f, err := os.Open("/dev/null")
		must(t, err)
		extra = append(extra, f)
	}
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	p := newPod(t, []App{
		{Name: "a", Exec: probe("fds")},
		// fds runs first: the probe's own Go runtime opens an epoll fd
		// once it sleeps.
		{Name: "b", Exec: probe("fds", "+", "sleep", "50ms")},
	}, nil)
	r := runPod(t, p, RunOpts{ExtraFds: extra})
	if r.Code != 0 {
		t.Fatalf("pod exit %d; stderr %s", r.Code, r.Stderr)
	}
	ls := r.Lines("fds ")
	if len(ls) != 2 {
		t.Fatalf("fds lines %q; stderr %s", ls, r.Stderr)
	}
	for _, l := range ls {
		if l != "fds 0 1 2" {
			t.Errorf("app saw %q", l)
		}
	}
}

// The lock is held while the pod runs and free after; at the moment it is
// free, no process of the pod exists (daemons the app left included) and
// every status file is complete.
func TestLockFreeMeansPodGoneAndStatusesFinal(t *testing.T) {
	for round := 0; round < 3; round++ {
		p := newPod(t, []App{
			// Orphaned daemons that would outlive the app.
			{Name: "daemons", Exec: probe("orphans", "20", "1h", "+", "sleep", "200ms", "+", "exit", "4")},
			{Name: "quick", Exec: probe("exit", "0")},
		}, nil)
		r := start(t, p, RunOpts{})
		ns := holdNS(t, podPid(t, p))
		if ns == "" {
			t.Fatal("no pid namespace seen")
		}
		for locked(t, p.Dir) {
			time.Sleep(200 * time.Microsecond)
		}
		// The instant the lock is free:
		if m := nsMembers(ns); len(m) != 0 {
			t.Fatalf("lock free while pod processes %v exist", m)
		}
		if p.Status(t, "daemons") != 4 || p.Status(t, "quick") != 0 {
			t.Fatalf("statuses not final when the lock was free: %d %d", p.Status(t, "daemons"), p.Status(t, "quick"))
		}
		if code := r.Wait(t); code != 4 {
			t.Fatalf("pod exit %d; stderr %s", code, r.Stderr)
		}
	}
}

func TestLockHeldWhileRunning(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "500ms")}}, nil)
	r := start(t, p, RunOpts{})
	podPid(t, p)
	if !locked(t, p.Dir) {
		t.Fatal("pod not locked while running")
	}
	r.Wait(t)
	if locked(t, p.Dir) {
		t.Fatal("pod still locked after the stage1 exited")
	}
}

// 1000 orphans re-parented to the pod's PID 1 are reaped: no zombie stays.
func TestThousandOrphansLeaveNoZombie(t *testing.T) {
	vol := t.TempDir()
	p := newPod(t, []App{{
		Name:    "spawner",
		Exec:    probe("orphans", "1000", "0s", "+", "touch", "/vol/spawned", "+", "sleep", "1h"),
		MPoints: []map[string]any{{"name": "vol", "path": "/vol"}},
	}}, []map[string]any{{"name": "vol", "kind": "host", "source": vol}})
	r := start(t, p, RunOpts{})
	ns := holdNS(t, podPid(t, p))
	waitFor(t, 60*time.Second, "orphans spawned", func() bool {
		_, err := os.Stat(filepath.Join(vol, "spawned"))
		return err == nil
	})
	// The last orphans are still starting up; once they are done, only
	// PID 1, pod1-pause (which reaped them) and the app remain, and
	// nothing is left a zombie.
	waitFor(t, 10*time.Second, "orphans gone", func() bool { return len(nsPids(ns)) == 3 })
	if z := zombiesIn(ns); z != 0 {
		t.Fatalf("%d zombies", z)
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
}

// If any stage1 process is SIGKILLed, no pod process survives it by more
// than a second and the lock is free only once none is left. An app that
// had exited keeps its status. When run is killed, PID 1 stops the pod
// (its parent's death is a forced stop), so the apps it killed read 137;
// when PID 1 is killed the kernel ends the pod and they have none
// (unknown, never a false 0).
func TestSIGKILLOfAStage1Process(t *testing.T) {
	for _, victim := range []string{"run", "init"} {
		t.Run(victim, func(t *testing.T) {
			p := newPod(t, []App{
				{Name: "early", Exec: probe("exit", "0")},
				{Name: "b", Exec: probe("orphans", "5", "1h", "+", "sleep", "1h")},
				{Name: "c", Exec: probe("sleep", "1h")},
			}, nil)
			r := start(t, p, RunOpts{})
			initPid := podPid(t, p)
			ns := holdNS(t, initPid)
			waitFor(t, 10*time.Second, "early app's status", func() bool { return p.Status(t, "early") == 0 })
			waitFor(t, 10*time.Second, "daemons", func() bool { return len(nsMembers(ns)) >= 8 })
			pid := r.Cmd.Process.Pid
			if victim == "init" {
				pid = initPid
			}
			must(t, unix.Kill(pid, unix.SIGKILL))
			t0 := time.Now()
			waitFor(t, time.Second, "the lock free", func() bool { return !locked(t, p.Dir) })
			if left := nsMembers(ns); len(left) != 0 {
				t.Fatalf("lock free with pod processes alive: %v", left)
			}
			t.Logf("pod gone %v after SIGKILL of %s", time.Since(t0), victim)
			r.Wait(t)
			// What a killed stage1 leaves (its cgroups) is the gc
			// entry point's to remove.
			cg := cgroupDirs(p)
			if victim == "run" && len(cg) == 0 {
				t.Error("expected the killed run to leave its cgroups for gc")
			}
			gc := exec.Command(filepath.Join(p.Dir, layout.Stage1RootFS, "gc"), p.UUID)
			gc.Dir = p.Dir
			if out, err := gc.CombinedOutput(); err != nil {
				t.Fatalf("gc: %v %s", err, out)
			}
			if left := cgroupDirs(p); len(left) != 0 {
				t.Errorf("cgroups left after gc: %v", left)
			}
			if got := p.Status(t, "early"); got != 0 {
				t.Errorf("early: status %d, want 0", got)
			}
			want := 137
			if victim == "init" {
				want = -1
			}
			for _, a := range []string{"b", "c"} {
				if got := p.Status(t, a); got != want {
					t.Errorf("killed app %s has status %d, want %d", a, got, want)
				}
			}
		})
	}
}

// The pod's PID 1 is in new mount, pid, uts, ipc and net namespaces; the
// app sees its hostname, loopback only (plus eth0 on the default
// network), and is not PID 1.
func TestNamespaces(t *testing.T) {
	host := map[string]string{}
	for _, n := range []string{"ipc", "mnt", "net", "pid", "uts"} {
		host[n], _ = os.Readlink("/proc/self/ns/" + n)
	}
	cases := []struct {
		name       string
		args       []string
		sameAsHost []string
		hostname   string
	}{
		{"default", []string{"--net=none"}, nil, ""},
		{"net-host-ipc-parent", []string{"--net=host", "--ipc=parent", "--hostname=web1"}, []string{"net", "ipc"}, "web1"},
		{"net-default", []string{"--net=default", "--ipc=private"}, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{{Name: "a", Exec: probe("ns", "+", "hostname", "+", "netdevs", "+", "pid")}}, nil)
			if c.name == "net-default" {
				withNetworking(t, p) // gc'd at cleanup
			}
			r := runPod(t, p, RunOpts{Args: c.args})
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			for _, n := range []string{"ipc", "mnt", "net", "pid", "uts"} {
				l := r.Line(t, "ns "+n+" ")
				same := strings.HasSuffix(l, host[n])
				want := false
				for _, s := range c.sameAsHost {
					want = want || s == n
				}
				if same != want {
					t.Errorf("%s namespace shared with host: %v, want %v", n, same, want)
				}
			}
			wantHost := c.hostname
			if wantHost == "" {
				wantHost = "rkt-" + p.UUID
			}
			if got := r.Line(t, "hostname "); got != "hostname "+wantHost {
				t.Errorf("got %q, want hostname %s", got, wantHost)
			}
			wantDevs := "netdevs lo"
			if c.name == "net-default" {
				wantDevs = "netdevs eth0 lo"
			}
			if c.name != "net-host-ipc-parent" && r.Line(t, "netdevs ") != wantDevs {
				t.Errorf("network devices: %q, want %q", r.Line(t, "netdevs "), wantDevs)
			}
			if !strings.HasPrefix(r.Line(t, "pid "), "pid ") || strings.HasPrefix(r.Line(t, "pid "), "pid 1 ") {
				t.Errorf("app is PID 1: %q", r.Line(t, "pid "))
			}
			// Its parent is the pod's PID 1, which has no pid in the
			// apps' namespace.
			if strings.Contains(r.Line(t, "pid "), "ppid 0") == false {
				t.Errorf("app's parent is in its pid namespace: %q", r.Line(t, "pid "))
			}
			if r.Stderr.Len() != 0 {
				t.Errorf("stderr: %q", r.Stderr)
			}
		})
	}
}
