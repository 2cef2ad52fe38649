package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childrenOf lists the children of pid (every thread's).
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, w := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(w); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// cgroupMembers lists the live processes in the pod's cgroups, in any
// hierarchy.
func cgroupMembers(p *Pod) []int {
	var out []int
	for _, d := range cgroupDirs(p) {
		_ = filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
			if err != nil || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, w := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(w); err == nil && alive(n) {
					out = append(out, n)
				}
			}
			return nil
		})
	}
	return out
}

// killRunAt SIGKILLs the run process once at has happened, first stopping
// it (SIGSTOP) so that the PID 1 it started, if any, is known and its pid
// namespace read. It returns that namespace ("" if there was no PID 1).
func killRunAt(t *testing.T, r *Run, at func()) string {
	t.Helper()
	at()
	pid := r.Cmd.Process.Pid
	must(t, unix.Kill(pid, unix.SIGSTOP))
	waitFor(t, 5*time.Second, "run stopped", func() bool { st := procState(pid); return st == "T" || st == "Z" || st == "" })
	ns := ""
	for _, c := range childrenOf(pid) {
		if l := holdNS(t, c); l != "" && l != pidNS(os.Getpid()) {
			ns = l
		}
	}
	must(t, unix.Kill(pid, unix.SIGKILL))
	return ns
}

// "Lock free" keeps its meaning when the run process is SIGKILLed at any
// moment of the pod's life, app start included (threats T21): the moment
// the pod's lock can be taken, no process of the pod is alive (in its pid
// namespace or its cgroups), and every app has its final status: its own
// code if it had ended, 137 if it was killed, 254 if it never started;
// none at all only if PID 1 never got to start any app. Never a false 0.
func TestSIGKILLOfRunSweep(t *testing.T) {
	type moment struct {
		name string
		at   func(t *testing.T, p *Pod)
	}
	var moments []moment
	for d := 0; d < 24; d++ {
		delay := time.Duration(d) * time.Millisecond
		moments = append(moments, moment{fmt.Sprintf("after-%v", delay), func(*testing.T, *Pod) { time.Sleep(delay) }})
	}
	moments = append(moments,
		moment{"pid-file", func(t *testing.T, p *Pod) { podPid(t, p) }},
		moment{"ready", func(t *testing.T, p *Pod) { waitSupervisorReady(t, p) }},
		moment{"daemons", func(t *testing.T, p *Pod) {
			waitSupervisorReady(t, p)
			ns := holdNS(t, podPid(t, p))
			waitFor(t, 10*time.Second, "daemons", func() bool { return len(nsMembers(ns)) >= 100 })
		}},
	)
	apps := []App{
		{Name: "early", Exec: probe("exit", "0")},
		{Name: "many", Exec: probe("orphans", "100", "1h", "+", "sleep", "1h")},
		{Name: "sleeper", Exec: probe("sleep", "1h")},
	}
	maxWait := time.Duration(0)
	for _, m := range moments {
		t.Run(m.name, func(t *testing.T) {
			p := newPod(t, apps, nil)
			r := start(t, p, RunOpts{})
			ns := killRunAt(t, r, func() { m.at(t, p) })
			r.Wait(t)
			t0 := time.Now()
			waitFor(t, 10*time.Second, "the lock free", func() bool { return !locked(t, p.Dir) })
			if ns != "" {
				if left := nsMembers(ns); len(left) != 0 {
					t.Fatalf("lock free with %d pod processes alive", len(left))
				}
			}
			if left := cgroupMembers(p); len(left) != 0 {
				t.Fatalf("lock free with %d processes in the pod's cgroups", len(left))
			}
			if d := time.Since(t0); d > maxWait {
				maxWait = d
			}
			codes := map[string]int{}
			known := false
			for _, a := range apps {
				codes[a.Name] = p.Status(t, a.Name)
				_, err := os.Stat(filepath.Join(p.statusDir(), a.Name+".json"))
				known = known || codes[a.Name] != -1 || err == nil
			}
			for _, a := range apps {
				c := codes[a.Name]
				ok := c == 137 || c == 254 || c == 0 && a.Name == "early" || c == -1 && !known
				if !ok {
					t.Errorf("app %s: status %d (all: %v); stderr %s", a.Name, c, codes, r.Stderr)
				}
			}
		})
	}
	t.Logf("longest wait from run's death to the lock free: %v", maxWait)
}

// A stop that reaches the pod right after it starts, through the stop
// entry point (as rkt stop does) or as a signal to the run process, even
// before PID 1 exists, is neither lost nor turned into a bogus exit code:
// the pod stops (its apps would sleep an hour; a lost stop hangs until
// the event deadline), exits 0,
// and every app has a status that says how: 143 (graceful) or 137 (forced)
// if it ran, 254 if the stop came before it started.
func TestEarlyStopSweep(t *testing.T) {
	type mode struct {
		name  string
		force bool
		runs  int
		stop  func(t *testing.T, p *Pod, r *Run, i int)
	}
	entry := func(force bool) func(t *testing.T, p *Pod, r *Run, i int) {
		return func(t *testing.T, p *Pod, r *Run, i int) {
			podPid(t, p)
			time.Sleep(time.Duration(i%4) * time.Millisecond)
			args := []string{p.UUID}
			if force {
				args = []string{"--force", p.UUID}
			}
			cmd := exec.Command(filepath.Join(p.Dir, "stage1/rootfs/stop"), args...)
			cmd.Dir = p.Dir
			cmd.WaitDelay = time.Second
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("stop: %v %s", err, out)
			}
		}
	}
	signal := func(sig unix.Signal) func(t *testing.T, p *Pod, r *Run, i int) {
		return func(t *testing.T, p *Pod, r *Run, i int) {
			// From the moment run has its signal table in (before
			// that, the Go runtime's defaults apply: see
			// docs/supervision.md), typically before PID 1 exists.
			waitFor(t, 5*time.Second, "run's signal table", func() bool { return ignores(r.Cmd.Process.Pid, unix.SIGUSR2) })
			time.Sleep(time.Duration(i) * 500 * time.Microsecond)
			must(t, r.Cmd.Process.Signal(sig))
		}
	}
	// What stop does, at the first moment the pid file names PID 1.
	direct := func(sig unix.Signal) func(t *testing.T, p *Pod, r *Run, i int) {
		return func(t *testing.T, p *Pod, r *Run, i int) {
			var pid int
			waitFor(t, 10*time.Second, "pid file", func() bool {
				b, err := os.ReadFile(filepath.Join(p.Dir, "pid"))
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil && pid > 0
			})
			must(t, unix.Kill(pid, sig))
		}
	}
	modes := []mode{
		{"stop", false, 15, entry(false)},
		{"stop-force", true, 15, entry(true)},
		{"pidfile-SIGTERM", false, 15, direct(unix.SIGTERM)},
		{"pidfile-SIGUSR1", true, 15, direct(unix.SIGUSR1)},
		{"run-SIGTERM", false, 15, signal(unix.SIGTERM)},
		{"run-SIGUSR1", true, 15, signal(unix.SIGUSR1)},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			want := 143
			if m.force {
				want = 137
			}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 3)
			for i := 0; i < m.runs; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					t.Run(strconv.Itoa(i), func(t *testing.T) {
						apps := []App{
							{Name: "a", Exec: probe("sleep", "1h")},
							{Name: "b", Exec: probe("sleep", "1h")},
						}
						p := newPod(t, apps, nil)
						r := start(t, p, RunOpts{})
						t0 := time.Now()
						m.stop(t, p, r, i)
						code := r.Wait(t)
						// No time bound: a stop that was lost hangs
						// (the event deadline turns that into a failure),
						// one that became a kill shows in the statuses
						// below (137, not the graceful code), and speed is
						// the bench's (its stop row), not this test's.
						t.Logf("the pod stopped in %v", time.Since(t0))
						if code != 0 {
							t.Errorf("pod exit %d; stderr %s", code, r.Stderr)
						}
						for _, a := range apps {
							if got := p.Status(t, a.Name); got != want && got != 254 {
								t.Errorf("app %s: status %d, want %d (or 254: not started); stderr %s", a.Name, got, want, r.Stderr)
							}
						}
					})
				}()
			}
			wg.Wait()
		})
	}
}

// ignores reports whether the process has SIG_IGN for sig (SigIgn).
func ignores(pid int, sig unix.Signal) bool { return sigMaskHas(pid, "SigIgn:", sig) }

// catches reports whether the process has a handler for sig (SigCgt).
func catches(pid int, sig unix.Signal) bool { return sigMaskHas(pid, "SigCgt:", sig) }

func sigMaskHas(pid int, field string, sig unix.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && m&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}
