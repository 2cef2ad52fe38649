package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// exitedPod runs a pod to its end with pod1 run; its overlays stay
// mounted, as rkt's do, until gc.
func exitedPod(t *testing.T, data, img string, code string) string {
	t.Helper()
	p := runBG(t, data, img, "--exec=/bin/probe", "--", "exit", code)
	if c := p.wait(t); strconv.Itoa(c) != code {
		t.Fatalf("pod exited %d, want %s: %s", c, code, p.Stderr)
	}
	if len(mountsUnder(t, p.Dir)) == 0 {
		t.Fatal("an overlay pod left no mounts: the test would prove nothing")
	}
	return p.UUID
}

// gc collects exited, aborted and expired pods, in two phases, and never
// a pod whose lock is held: running, being prepared, or being collected.
func TestHostsideGCCollects(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	running := runBG(t, data, img, "--exec=/bin/probe", "--", "sleep", "1h")
	running.waitPid(t)
	exited := exitedPod(t, data, img, "0")
	// A stage1 that died before writing pid: its gc entrypoint must
	// still succeed (gc would keep the pod and exit 254 otherwise).
	neverStarted := fakePod(t, data, "run", map[string]int{"a": -1}, false)
	aborted := fakePod(t, data, "prepare", map[string]int{"a": -1}, false)
	preparing := fakePod(t, data, "prepare", map[string]int{"a": -1}, false)
	holdLock(t, filepath.Join(data, "pods/prepare", preparing))
	prepared := fakePod(t, data, "prepared", map[string]int{"a": -1}, false)
	embryo := fakePod(t, data, "embryo", nil, false)
	deleting := fakePod(t, data, "exited-garbage", map[string]int{"a": 0}, true)
	releaseDeleting := holdLock(t, filepath.Join(data, "pods/exited-garbage", deleting))

	expect := func(when string, want map[string]string) {
		t.Helper()
		got := podDirs(t, data)
		for u, s := range want {
			if got[u] != s {
				t.Errorf("%s: pod %s in %q, want %q", when, u, got[u], s)
			}
		}
		if len(got) != len(want)-countEmpty(want) {
			t.Errorf("%s: pods %v, want %v", when, got, want)
		}
	}
	_, errOut, code := pod1(t, data, "gc", "--mark-only")
	expect("mark-only", map[string]string{running.UUID: "run", exited: "exited-garbage", neverStarted: "exited-garbage", aborted: "garbage",
		preparing: "prepare", prepared: "prepared", embryo: "embryo", deleting: "exited-garbage"})
	if code != 0 || !strings.Contains(errOut, `moving pod "`+exited+`" to garbage`) {
		t.Errorf("mark-only: %d %q", code, errOut)
	}
	// Within the grace period the exited pod stays (mounts and all); the
	// garbage goes.
	_, errOut, _ = pod1(t, data, "gc")
	if !strings.Contains(errOut, `pod "`+exited+`" not removed: still within grace period (30m0s)`) {
		t.Errorf("grace period: %q", errOut)
	}
	expect("grace", map[string]string{running.UUID: "run", exited: "exited-garbage", neverStarted: "exited-garbage", aborted: "",
		preparing: "prepare", prepared: "prepared", embryo: "embryo", deleting: "exited-garbage"})
	out, errOut, code := pod1(t, data, "gc", "--grace-period=0s")
	if code != 0 || !strings.Contains(out, `Garbage collecting pod "`+exited+`"`) || !strings.Contains(out, `Garbage collecting pod "`+neverStarted+`"`) {
		t.Errorf("gc: %d %q %q", code, out, errOut)
	}
	expect("sweep", map[string]string{running.UUID: "run", preparing: "prepare", prepared: "prepared",
		embryo: "embryo", deleting: "exited-garbage"})
	if m := mountsUnder(t, filepath.Join(data, "pods/exited-garbage")); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	time.Sleep(20 * time.Millisecond)
	pod1(t, data, "gc", "--expire-prepared=10ms")
	expect("expire", map[string]string{running.UUID: "run", preparing: "prepare", deleting: "exited-garbage"})
	if got := running.waitPid(t); syscall.Kill(got, 0) != nil {
		t.Fatal("gc killed a running pod")
	}
	// Once stopped and unlocked, everything goes.
	if out, errOut, code := pod1(t, data, "stop", running.UUID); code != 0 || out != "\""+running.UUID+"\"\n" {
		t.Fatalf("stop: %d %q %q", code, out, errOut)
	}
	running.wait(t)
	releaseDeleting()
	pod1(t, data, "gc", "--grace-period=0s")
	expect("final", map[string]string{preparing: "prepare"})
	if m := mountsUnder(t, data); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
}

func countEmpty(m map[string]string) int {
	n := 0
	for _, v := range m {
		if v == "" {
			n++
		}
	}
	return n
}

// gc runs beside pod1 run starting pods in a loop (and beside list and a
// second gc): no pod is collected while it lives, every one is collected
// once over, and nothing stays mounted.
func TestHostsideGCBesideRunAndItself(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	gcs := func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, errOut, code := pod1(t, data, "gc", "--grace-period=0s"); code != 0 {
				t.Errorf("gc: %d %s", code, errOut)
			}
			if _, errOut, code := pod1(t, data, "list"); code != 0 || errOut != "" {
				t.Errorf("list: %d %s", code, errOut)
			}
		}
	}
	wg.Add(2)
	go gcs()
	go gcs()
	for i := 0; i < 12; i++ {
		p := runBG(t, data, img, "--exec=/bin/probe", "--", "sleep", "20ms", "+", "exit", "0")
		if c := p.wait(t); c != 0 {
			t.Errorf("pod %d exited %d beside gc: %s", i, c, p.Stderr)
		}
	}
	close(stop)
	wg.Wait()
	if _, errOut, code := pod1(t, data, "gc", "--grace-period=0s"); code != 0 {
		t.Fatalf("final gc: %d %s", code, errOut)
	}
	if d := podDirs(t, data); len(d) != 0 {
		t.Errorf("pods left: %v", d)
	}
	if m := mountsUnder(t, data); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// gc killed with SIGKILL at every step of collecting a pod leaves each pod
// whole in a state directory (or, once only files are left, in garbage/),
// and the next run finishes the job with no mount left.
func TestHostsideGCKilledAtEachStep(t *testing.T) {
	img := probeACIDir(t)
	for _, step := range []string{"mark", "stage1-gc", "unmount", "to-garbage", "remove", "removing"} {
		t.Run(step, func(t *testing.T) {
			data := dataDir(t)
			pods := []string{exitedPod(t, data, img, "0"), exitedPod(t, data, img, "2")}
			t.Setenv("POD1_TEST_GC_KILL_AT", step)
			_, _, code := pod1(t, data, "gc", "--grace-period=0s")
			must(t, os.Unsetenv("POD1_TEST_GC_KILL_AT"))
			if code != 128+int(syscall.SIGKILL) {
				t.Fatalf("gc was not killed at %s: %d", step, code)
			}
			for u, state := range podDirs(t, data) {
				if _, err := os.Stat(filepath.Join(data, "pods", state, u, "pod")); err != nil && state != "garbage" {
					t.Errorf("pod %s half-removed in %s", u, state)
				}
			}
			if _, errOut, code := pod1(t, data, "gc", "--grace-period=0s"); code != 0 {
				t.Fatalf("gc after the kill: %d %s", code, errOut)
			}
			if d := podDirs(t, data); len(d) != 0 {
				t.Errorf("pods %v left of %v", d, pods)
			}
			if m := mountsUnder(t, data); len(m) != 0 {
				t.Errorf("mounts left: %v", m)
			}
		})
	}
}

// A pod whose stage1 was SIGKILLed (no orderly end, its overlays and
// cgroups left) is collected with nothing left behind.
func TestHostsideGCAfterStage1Killed(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	p := runBG(t, data, img, "--exec=/bin/probe", "--", "sleep", "1h")
	pid := p.waitPid(t)
	ns := holdNS(t, pid)
	must(t, p.Cmd.Process.Signal(syscall.SIGKILL)) // pod1 run became the stage1's run
	p.wait(t)
	waitFor(t, 5*time.Second, "pod processes gone", func() bool { return len(nsMembers(ns)) == 0 })
	out, _, _ := pod1(t, data, "status", p.UUID)
	// PID 1 stopped the pod when run died: the app was killed (137), or
	// never started (254); never a false 0.
	if !strings.HasPrefix(out, "state=exited\n") || !strings.Contains(out, "app-probe=137\n") && !strings.Contains(out, "app-probe=254\n") {
		t.Fatalf("killed pod: %q", out)
	}
	if len(mountsUnder(t, p.Dir)) == 0 {
		t.Fatal("no overlay left mounted: the test would prove nothing")
	}
	cg := cgroupDirs(&Pod{UUID: p.UUID})
	if len(cg) == 0 {
		t.Fatal("the killed stage1 left no cgroups: the test would prove nothing")
	}
	if _, errOut, code := pod1(t, data, "gc", "--grace-period=0s"); code != 0 {
		t.Fatalf("gc: %d %s", code, errOut)
	}
	if d := podDirs(t, data); len(d) != 0 {
		t.Errorf("pods left: %v", d)
	}
	if m := mountsUnder(t, data); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	if left := cgroupDirs(&Pod{UUID: p.UUID}); len(left) != 0 {
		t.Errorf("cgroups left: %v (had %v)", left, cg)
	}
}

// A pod that ends in order leaves its cgroups, with no process in them,
// until gc removes them, as rkt's stage1 does (rkt's TestGCCgroup and
// TestRmCgroup look for them between the run and the gc): the gc entry
// point, and pod1 gc in its own process.
func TestPodCgroupsStayEmptyUntilGC(t *testing.T) {
	t.Run("gc entry point", func(t *testing.T) {
		p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
		if r := runPod(t, p, RunOpts{}); r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		cg := cgroupDirs(p)
		if len(cg) == 0 {
			t.Fatal("no cgroups left after the pod's end, to be removed by gc")
		}
		assertNoProcessIn(t, cg)
		if out, code := gcEntry(t, p); code != 0 {
			t.Fatalf("gc: %d %s", code, out)
		}
		if left := cgroupDirs(p); len(left) != 0 {
			t.Errorf("cgroups left after gc: %v", left)
		}
	})
	t.Run("pod1 gc", func(t *testing.T) {
		data := dataDir(t)
		bp := runBG(t, data, probeACIDir(t), "--exec=/bin/probe", "--", "exit", "0")
		if c := bp.wait(t); c != 0 {
			t.Fatalf("exit %d: %s", c, bp.Stderr)
		}
		p := &Pod{UUID: bp.UUID}
		cg := cgroupDirs(p)
		if len(cg) == 0 {
			t.Fatal("no cgroups left after the pod's end, to be removed by gc")
		}
		assertNoProcessIn(t, cg)
		if _, errOut, code := pod1(t, data, "gc", "--grace-period=0s"); code != 0 {
			t.Fatalf("gc: %d %s", code, errOut)
		}
		if left := cgroupDirs(p); len(left) != 0 {
			t.Errorf("cgroups left after gc: %v", left)
		}
	})
}

// assertNoProcessIn fails if any of the cgroup directories, or any below
// them, lists a process.
func assertNoProcessIn(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			if b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs")); len(strings.TrimSpace(string(b))) > 0 {
				t.Errorf("%s lists processes after the pod's end: %q", p, b)
			}
			return nil
		})
	}
}
