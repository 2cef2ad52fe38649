package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// startUnderWaiter starts the pod and returns once PID 1 is ready and the Go run has handed over, with the
// waiter's pid.
func startUnderWaiter(t *testing.T, p *Pod) (*Run, int) {
	t.Helper()
	r := start(t, p, RunOpts{})
	pid := r.Cmd.Process.Pid
	waitSupervisorReady(t, p)
	waitFor(t, eventDeadline, "the hand-over", func() bool { return handedOver(pid) })
	return r, pid
}

// handedOver reports whether the Go run the waiter pid started has handed
// over and gone: only PID 1 and the lock keeper are left as its children.
func handedOver(pid int) bool {
	for _, c := range childrenOf(pid) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		if strings.HasPrefix(string(b), "run\x00") {
			return false
		}
	}
	return len(childrenOf(pid)) == 2
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

// stopPod stops the pod run r with SIGTERM, as a user would, and checks
// that it ends with 0 and leaves nothing (checkOver).
func stopPod(t *testing.T, p *Pod, r *Run, ns string) {
	t.Helper()
	must(t, unix.Kill(r.Cmd.Process.Pid, unix.SIGTERM))
	if code := r.Wait(t); code != 0 {
		t.Errorf("pod exit %d; stderr %s", code, r.Stderr)
	}
	checkOver(t, p, ns, r)
}

// podNetns returns PID 1's (init's) network namespace, and whether the
// run process shares it (--net=host).
func podNetns(init, run int) (ns string, shared bool) {
	ns, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", init))
	runNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", run))
	return ns, ns == runNS
}

// checkOver checks what "run has exited" must mean: the lock free, no
// process of the pod's pid namespace ns or of its cgroups alive. The
// pod's emptied cgroups stay for gc, as the Go run leaves them (rkt's
// way): their presence is checked where cgroups are made at all.
func checkOver(t *testing.T, p *Pod, ns string, r *Run) {
	t.Helper()
	if locked(t, p.Dir) {
		t.Errorf("the lock is held after run exited; stderr %s", r.Stderr)
	}
	if left := nsMembers(ns); ns != "" && len(left) != 0 {
		t.Errorf("%d pod processes alive after run exited (run was pid %d, the test is %d): %s", len(left), r.Cmd.Process.Pid, os.Getpid(), describeProcs(left))
	}
	if left := cgroupMembers(p); len(left) != 0 {
		t.Errorf("%d processes in the pod's cgroups after run exited", len(left))
	}
}

// Once the waiter has taken over, it is what run was: it holds the lock
// and nothing else of the host but stdio and PID 1's pidfd (and, of the
// pod, its network namespace), ignores the signals run ignores, passes a
// graceful or a forced stop on, and exits with PID 1's code, or 254 if
// PID 1 was killed; the lock is free only when every pod process is gone.
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
			r := start(t, p, RunOpts{})
			pid := r.Cmd.Process.Pid
			waitSupervisorReady(t, p)
			waitFor(t, 10*time.Second, "the hand-over", func() bool { return handedOver(pid) })
			init := podPid(t, p)
			ns := holdNS(t, init)
			var fds []string
			// The waiter opens PID 1's pidfd once it has read the
			// report and reaped the Go run.
			waitFor(t, 10*time.Second, "the waiter's pidfd of PID 1", func() bool {
				fds = fdsOf(pid)
				return slices.ContainsFunc(fds, func(s string) bool { return strings.HasSuffix(s, "=anon_inode:[pidfd]") })
			})
			// stdio, the lock, PID 1's pidfd, the signalfd, and
			// whatever the caller (this test) left inheritable.
			mine := map[string]bool{}
			for _, f := range fdsOf(os.Getpid()) {
				mine[f] = true
			}
			var own []string
			for _, f := range fds {
				if n, _, _ := strings.Cut(f, "="); n > "2" && !mine[f] {
					own = append(own, f)
				}
			}
			slices.Sort(own)
			// And the done pipe's read end, whose write end is the
			// lock keeper's fd 6: the waiter waits for the keeper to
			// close it (its statuses committed, its copy of the
			// lock closed), not for the keeper's exit.
			done, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/6", keeperOf(t, pid)))
			if err != nil || !strings.HasPrefix(done, "pipe:") {
				t.Errorf("the keeper's fd 6: %q, %v; want the done pipe", done, err)
			}
			if !slices.ContainsFunc(own, func(s string) bool { return strings.HasSuffix(s, "="+done) }) {
				t.Errorf("the waiter does not hold the keeper's done pipe %s: %v", done, own)
			}
			// Nothing of the pod's: no namespace of PID 1's.
			if podNet, shared := podNetns(init, pid); !shared && slices.ContainsFunc(own, func(s string) bool { return strings.HasSuffix(s, "="+podNet) }) {
				t.Errorf("the waiter holds PID 1's network namespace %s: %v", podNet, own)
			}
			if len(own) != 4 || !slices.ContainsFunc(own, func(s string) bool { return strings.HasSuffix(s, "=anon_inode:[pidfd]") }) ||
				!slices.ContainsFunc(own, func(s string) bool { return strings.HasSuffix(s, "=anon_inode:[signalfd]") }) ||
				!slices.ContainsFunc(own, func(s string) bool { return strings.HasSuffix(s, "="+p.Dir) }) {
				t.Errorf("the waiter's fds: %v (all: %v)", own, fds)
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
		r := start(t, p, RunOpts{})
		waitFor(t, 10*time.Second, "the hand-over", func() bool { return handedOver(r.Cmd.Process.Pid) })
		ns := holdNS(t, podPid(t, p))
		if code := r.Wait(t); code != 3 {
			t.Errorf("pod exit %d, want 3; stderr %s", code, r.Stderr)
		}
		checkOver(t, p, ns, r)
	})
}

// The hand-over sweep (issue 16): SIGTERM, SIGINT or SIGHUP sent to the
// run process (the waiter) at stepped and random moments of the pod's
// start (before PID 1 exists, while the Go run sets up, around its report
// and after it) is never lost: the pod stops gracefully (its apps would
// sleep an hour), exits 0, every app has its final status (143, or 254 if
// the stop came before it started), and once run has exited the lock is
// free, no pod process is alive and the pod's cgroups are empty.
func TestWaiterHandoverSweep(t *testing.T) {
	const steps = 24
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 3)
			var mu sync.Mutex
			after := 0
			for i := 0; i < steps; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					t.Run(strconv.Itoa(i), func(t *testing.T) {
						apps := []App{{Name: "a", Exec: probe("sleep", "1h")}, {Name: "b", Exec: probe("sleep", "1h")}}
						p := newPod(t, apps, nil)
						r := start(t, p, RunOpts{})
						pid := r.Cmd.Process.Pid
						// Even steps from run's start, in steps of
						// 1.5 ms; odd ones from the pid file, which
						// the Go run writes just before its report,
						// in steps of 300 µs; each with up to one
						// step more at random.
						// From the moment the waiter has its signal
						// table in: before, the kernel's defaults
						// apply, as they do to any program before its
						// first instruction (docs/supervision.md).
						waitFor(t, 5*time.Second, "the waiter's signal table", func() bool { return ignores(pid, unix.SIGUSR2) })
						step := 1500 * time.Microsecond
						if i%2 == 1 {
							podPid(t, p)
							step = 300 * time.Microsecond
						}
						time.Sleep(time.Duration(i/2)*step + rand.N(step))
						over := handedOver(pid)
						ns := ""
						if init := childrenOf(pid); len(init) > 0 {
							// PID 1 or the Go run: whichever is in
							// a pid namespace of its own.
							for _, c := range init {
								if l := holdNS(t, c); l != pidNS(os.Getpid()) {
									ns = l
								}
							}
						}
						must(t, unix.Kill(pid, sig))
						if over {
							mu.Lock()
							after++
							mu.Unlock()
						}
						code := r.Wait(t)
						if code != 0 {
							t.Errorf("pod exit %d; stderr %s", code, r.Stderr)
						}
						checkOver(t, p, ns, r)
						for _, a := range apps {
							if got := p.Status(t, a.Name); got != 143 && got != 254 {
								t.Errorf("app %s: status %d, want 143 (or 254: not started); stderr %s", a.Name, got, r.Stderr)
							}
						}
					})
				}()
			}
			wg.Wait()
			t.Logf("%d of %d signals came after the hand-over", after, steps)
		})
	}
}

// describeProcs says what each process is (name, state, parent, pids in
// each namespace, command line), so that a failure names the culprit.
func describeProcs(pids []int) string {
	var out []string
	for _, pid := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		var f []string
		for _, l := range strings.Split(string(b), "\n") {
			for _, k := range []string{"Name:", "State:", "PPid:", "NSpid:"} {
				if strings.HasPrefix(l, k) {
					f = append(f, strings.Join(strings.Fields(l), " "))
				}
			}
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		ppid := 0
		for _, l := range f {
			if strings.HasPrefix(l, "PPid: ") {
				ppid, _ = strconv.Atoi(strings.TrimPrefix(l, "PPid: "))
			}
		}
		pcmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppid))
		pst, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ppid))
		pexe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid))
		out = append(out, fmt.Sprintf("[pid %d: %s; cmdline %q; parent's cmdline %q, stat %q, exe %q]", pid, strings.Join(f, ", "),
			strings.ReplaceAll(string(cmd), "\x00", " "), strings.ReplaceAll(string(pcmd), "\x00", " "), pst, pexe))
	}
	return strings.Join(out, " ")
}

// rssKiB is the resident set of pid in KiB, from smaps_rollup.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "Rss:" {
			n, err := strconv.Atoi(f[1])
			must(t, err)
			return n
		}
	}
	t.Fatalf("pid %d: no Rss in smaps_rollup", pid)
	return 0
}

// The waiter and the lock keeper (one static C binary) only wait for the
// pod's whole life: each keeps little resident once it has shed its
// read-only pages. Built against musl they keep well under the bound
// below; against glibc each keeps about twice it (static glibc's start-up
// and string functions fault in pages of their own), which the stage1's
// memory target (issue 16) cannot spare.
func TestWaiterAndKeeperAreSmall(t *testing.T) {
	const maxKiB = 150
	apps := []App{{Name: "a", Exec: probe("sleep", "1h")}}
	p := newPod(t, apps, nil)
	r := start(t, p, RunOpts{})
	pid := r.Cmd.Process.Pid
	init := podPid(t, p)
	ns := holdNS(t, init)
	waitFor(t, 10*time.Second, "the hand-over", func() bool { return handedOver(pid) })
	keeper := keeperOf(t, pid)
	// Each sheds its pages once it only waits: wait for that, and fail
	// if it never comes down to the bound.
	for _, w := range []struct {
		name string
		pid  int
	}{{"waiter", pid}, {"lock keeper", keeper}} {
		kib := 0
		deadline := time.Now().Add(5 * time.Second)
		for kib = rssKiB(t, w.pid); kib > maxKiB && time.Now().Before(deadline); kib = rssKiB(t, w.pid) {
			time.Sleep(10 * time.Millisecond)
		}
		if kib > maxKiB {
			t.Errorf("the %s keeps %d KiB resident, want at most %d (is bin/pod1-waiter linked against musl? Debian's musl-tools)", w.name, kib, maxKiB)
		}
	}
	stopPod(t, p, r, ns)
}

// PID 1 and the lock keeper run from read-only copies of their binaries,
// by their paths in /proc/self/fd: without names of their own they would
// show in ps, top and pgrep as the fd's number ("256").
func TestStage1ProcessesAreNamed(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{})
	pid := r.Cmd.Process.Pid
	init := podPid(t, p)
	ns := holdNS(t, init)
	waitSupervisorReady(t, p)
	for _, w := range []struct {
		pid  int
		want string
	}{{pid, "run"}, {init, "pod1-init"}, {keeperOf(t, pid), "pod1-lock"}} {
		// The keeper names itself first thing in main, which it
		// may not have reached yet.
		var got string
		deadline := time.Now().Add(eventDeadline)
		for got != w.want && time.Now().Before(deadline) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", w.pid))
			must(t, err)
			if got = strings.TrimSpace(string(b)); got != w.want {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if got != w.want {
			t.Errorf("pid %d is named %q, want %q", w.pid, got, w.want)
		}
	}
	// PID 1's threads too, once it is settled (it names those
	// the runtime started before it named itself then).
	var names []string
	waitFor(t, eventDeadline, "PID 1's threads named", func() bool {
		names = names[:0]
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", init))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", init, task.Name()))
			names = append(names, strings.TrimSpace(string(b)))
		}
		return len(names) > 1 && !slices.ContainsFunc(names, func(n string) bool { return n != "pod1-init" })
	})
	stopPod(t, p, r, ns)
}

// codeRssKiB sums what pid keeps resident of its own executable's
// read-only mappings (its code and constants), and their size; 0, 0 once
// pid is gone.
func codeRssKiB(t *testing.T, pid int) (rss, size int) {
	t.Helper()
	var exe unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), &exe); err != nil {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0
	}
	mine := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4:
			ino, _ := strconv.ParseUint(f[4], 10, 64)
			mine = ino == exe.Ino && !strings.Contains(f[1], "w")
		case mine && len(f) == 3 && (f[0] == "Size:" || f[0] == "Rss:"):
			n, err := strconv.Atoi(f[1])
			must(t, err)
			if f[0] == "Size:" {
				size += n
			} else {
				rss += n
			}
		}
	}
	return rss, size
}

// Once the pod is up, PID 1 sheds the pages of its binary that only
// start-up used; when a stop begins it maps them back in at once, while
// the apps exit, so that the pod's end does not fault them in one by one
// on the way to the lock's release.
func TestStopRestoresPID1Code(t *testing.T) {
	a := App{Name: "a", Exec: probe("ignore-term", "+", "sleep", "1h"), Annotations: map[string]string{"pod1/stop-grace-period": "3s"}}
	p := newPod(t, []App{a}, nil)
	r := start(t, p, RunOpts{})
	init := podPid(t, p)
	ns := holdNS(t, init)
	waitSupervisorReady(t, p)
	rss, size := 0, 0
	waitFor(t, 10*time.Second, "PID 1 shedding its code", func() bool {
		rss, size = codeRssKiB(t, init)
		return size > 0 && rss < size/2
	})
	t.Logf("after the shedding: %d of %d KiB of code resident", rss, size)
	must(t, unix.Kill(r.Cmd.Process.Pid, unix.SIGTERM))
	waitFor(t, 2*time.Second, "PID 1's code mapped back in once the stop began", func() bool {
		rss, _ = codeRssKiB(t, init)
		return rss >= size*9/10
	})
	if code := r.Wait(t); code != 0 {
		t.Errorf("pod exit %d; stderr %s", code, r.Stderr)
	}
	checkOver(t, p, ns, r)
	if got := p.Status(t, "a"); got != 137 {
		t.Errorf("app a: status %d, want 137 (killed at the end of its grace)", got)
	}
}

// The waiter primes the kernel's cgroup move path while the pod starts by
// writing itself to its own cgroup.procs, again and again
// (prime_cgroups): that must move it nowhere. Started from a cgroup v2
// group of its own (not the root, where a write to the wrong
// cgroup.procs would move nothing either), it is still there once the
// pod is up.
func TestWaiterPrimingMovesNothing(t *testing.T) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	if !strings.Contains(string(mi), " - cgroup2 ") {
		t.Skip("no cgroup2 mount: the waiter primes only a cgroup v2 group (waiter.c, prime_cgroups)")
	}
	v2 := cgroupFile(t, os.Getpid(), "no-such-controller", "")
	caller := filepath.Join(v2, fmt.Sprintf("pod1-test-caller-%d", os.Getpid()))
	must(t, os.Mkdir(caller, 0o755))
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	t.Cleanup(func() {
		// The pod's cgroups (the v2 one below caller's) first.
		if err := cgroups.RemovePod(p.Dir, p.UUID); err != nil {
			t.Errorf("remove the pod's cgroups: %v", err)
		}
		if err := os.Remove(caller); err != nil {
			t.Errorf("remove %s: %v", caller, err)
		}
	})
	r := start(t, p, RunOpts{Wrapper: []string{"sh", "-c", `echo $$ >"$0/cgroup.procs" && exec "$@"`, caller}})
	pid := r.Cmd.Process.Pid
	// A pod that fails to start says why, at once.
	waitFor(t, eventDeadline, "supervisor ready", func() bool {
		select {
		case <-r.done:
			t.Fatalf("the pod ended before it was ready: exit %d\n%s", r.Code, r.Stderr)
		default:
		}
		_, err := os.Lstat(filepath.Join(p.Dir, layout.SupervisorStatus))
		return err == nil
	})
	waitFor(t, eventDeadline, "the hand-over", func() bool { return handedOver(pid) })
	if got := cgroupFile(t, pid, "no-such-controller", ""); got != caller {
		t.Errorf("the waiter is in %s, not in %s where its caller put it", got, caller)
	}
	stopPod(t, p, r, "")
}
