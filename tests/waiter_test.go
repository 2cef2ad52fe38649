package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waiterEnv turns on run's hand-over to the waiter (stage1-init/waiter.go).
var waiterEnv = []string{"POD1_WAITER=1"}

// isWaiter reports whether the process pid has become the waiter.
func isWaiter(pid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.HasPrefix(string(b), "pod1-waiter\x00")
}

// fdsOf lists the open fds of pid as "N=target".
func fdsOf(pid int) []string {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var fds []string
	for _, e := range ents {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		fds = append(fds, e.Name()+"="+l)
	}
	return fds
}

// checkOver checks what "run has exited" must mean: the lock free, no
// process of the pod's pid namespace ns or of its cgroups alive, and the
// pod's cgroups removed.
func checkOver(t *testing.T, p *Pod, ns string, r *Run) {
	t.Helper()
	if locked(t, p.Dir) {
		t.Errorf("the lock is held after run exited; stderr %s", r.Stderr)
	}
	if left := nsMembers(ns); len(left) != 0 {
		t.Errorf("%d pod processes alive after run exited", len(left))
	}
	if left := cgroupMembers(p); len(left) != 0 {
		t.Errorf("%d processes in the pod's cgroups after run exited", len(left))
	}
	if d := cgroupDirs(p); len(d) != 0 {
		t.Errorf("cgroups left: %v", d)
	}
}

// Once the waiter has taken over, it is what run was: it holds the lock
// and nothing else of the host but stdio and PID 1's pidfd, ignores the
// signals run ignores, passes a graceful or a forced stop on, and exits
// with PID 1's code, or 254 if PID 1 was killed; the lock is free only
// when every pod process is gone.
func TestWaiter(t *testing.T) {
	type mode struct {
		name   string
		sig    unix.Signal // to the waiter; 0: PID 1 SIGKILLed
		status int         // each app's
		code   int         // the pod's
	}
	for _, m := range []mode{
		{"SIGTERM", unix.SIGTERM, 143, 0},
		{"SIGINT", unix.SIGINT, 143, 0},
		{"SIGHUP", unix.SIGHUP, 143, 0},
		{"SIGQUIT", unix.SIGQUIT, 137, 0},
		{"SIGUSR1", unix.SIGUSR1, 137, 0},
		{"PID1-SIGKILL", 0, -1, 254},
	} {
		t.Run(m.name, func(t *testing.T) {
			apps := []App{{Name: "a", Exec: probe("sleep", "1h")}, {Name: "b", Exec: probe("sleep", "1h")}}
			p := newPod(t, apps, nil)
			r := start(t, p, RunOpts{Env: waiterEnv})
			pid := r.Cmd.Process.Pid
			waitSupervisorReady(t, p)
			waitFor(t, 10*time.Second, "the hand-over", func() bool { return isWaiter(pid) })
			init := podPid(t, p)
			ns := pidNS(init)
			var fds []string
			// Set up once its signalfd is open.
			waitFor(t, 10*time.Second, "the waiter's signalfd", func() bool {
				fds = fdsOf(pid)
				return slices.ContainsFunc(fds, func(s string) bool { return strings.HasSuffix(s, "=anon_inode:[signalfd]") })
			})
			// stdio, the lock, PID 1's pidfd, the signalfd.
			if len(fds) != 6 || !slices.ContainsFunc(fds, func(s string) bool { return strings.HasSuffix(s, "=anon_inode:[pidfd]") }) ||
				!slices.ContainsFunc(fds, func(s string) bool { return strings.HasSuffix(s, "=anon_inode:[signalfd]") }) ||
				!slices.ContainsFunc(fds, func(s string) bool { return strings.HasSuffix(s, "="+p.Dir) }) {
				t.Errorf("the waiter's fds: %v", fds)
			}
			// Ignored, as by run: none of these ends it.
			for _, s := range []unix.Signal{unix.SIGUSR2, unix.SIGPIPE, unix.SIGALRM, unix.SIGTSTP, unix.SIGSEGV, unix.Signal(34), unix.Signal(64)} {
				must(t, unix.Kill(pid, s))
			}
			if m.sig != 0 {
				must(t, unix.Kill(pid, m.sig))
			} else {
				must(t, unix.Kill(init, unix.SIGKILL))
			}
			if code := r.Wait(t); code != m.code {
				t.Errorf("pod exit %d, want %d; stderr %s", code, m.code, r.Stderr)
			}
			checkOver(t, p, ns, r)
			for _, a := range apps {
				if got := p.Status(t, a.Name); got != m.status {
					t.Errorf("app %s: status %d, want %d; stderr %s", a.Name, got, m.status, r.Stderr)
				}
			}
			if m.sig == 0 && !strings.Contains(r.Stderr.String(), "stage1: pod init killed by signal 9") {
				t.Errorf("stderr %q: want the line on PID 1's death", r.Stderr)
			}
		})
	}
	t.Run("exit-code", func(t *testing.T) {
		apps := []App{{Name: "a", Exec: probe("sleep", "300ms", "+", "exit", "3")}, {Name: "b", Exec: probe("sleep", "1h")}}
		p := newPod(t, apps, nil)
		r := start(t, p, RunOpts{Env: waiterEnv})
		waitFor(t, 10*time.Second, "the hand-over", func() bool { return isWaiter(r.Cmd.Process.Pid) })
		ns := pidNS(podPid(t, p))
		if code := r.Wait(t); code != 3 {
			t.Errorf("pod exit %d, want 3; stderr %s", code, r.Stderr)
		}
		checkOver(t, p, ns, r)
	})
}

// The hand-over sweep (issue 16): SIGTERM, SIGINT or SIGHUP sent to the
// run process at stepped and random moments around its hand-over to the
// waiter (before it, while run blocks the stop signals and execs, and
// after it) is never lost: the pod stops gracefully (its apps would sleep
// an hour), exits 0, every app has its final status (143, or 254 if the
// stop came before it started), and the lock is free only once every pod
// process is gone.
func TestWaiterHandoverSweep(t *testing.T) {
	const steps = 24
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 3)
			var mu sync.Mutex
			handedOver := 0
			for i := 0; i < steps; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					t.Run(strconv.Itoa(i), func(t *testing.T) {
						apps := []App{{Name: "a", Exec: probe("sleep", "1h")}, {Name: "b", Exec: probe("sleep", "1h")}}
						p := newPod(t, apps, nil)
						r := start(t, p, RunOpts{Env: waiterEnv})
						pid := r.Cmd.Process.Pid
						// From the pid file, which run writes just
						// before it hands over: steps of 400 µs with
						// up to 400 µs more at random, ~10 ms in all.
						init := podPid(t, p)
						ns := pidNS(init)
						time.Sleep(time.Duration(i)*400*time.Microsecond + rand.N(400*time.Microsecond))
						waiter := isWaiter(pid)
						must(t, unix.Kill(pid, sig))
						if waiter {
							mu.Lock()
							handedOver++
							mu.Unlock()
						}
						if code := r.Wait(t); code != 0 {
							t.Errorf("pod exit %d; stderr %s", code, r.Stderr)
						}
						checkOver(t, p, ns, r)
						for _, a := range apps {
							if got := p.Status(t, a.Name); got != 143 && got != 254 {
								t.Errorf("app %s: status %d, want 143 (or 254: not started); stderr %s", a.Name, got, r.Stderr)
							}
						}
						if strings.Contains(r.Stderr.String(), "hand-over to the waiter") {
							t.Errorf("the hand-over failed: %s", r.Stderr)
						}
					})
				}()
			}
			wg.Wait()
			t.Logf("%d of %d signals reached the waiter, the rest run", handedOver, steps)
		})
	}
}

// Without the switch nothing changes: run waits itself.
func TestWaiterOffByDefault(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{})
	waitSupervisorReady(t, p)
	time.Sleep(50 * time.Millisecond)
	if isWaiter(r.Cmd.Process.Pid) {
		t.Error("run handed over without POD1_WAITER=1")
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	if code := r.Wait(t); code != 0 {
		t.Errorf("pod exit %d; stderr %s", code, r.Stderr)
	}
}
