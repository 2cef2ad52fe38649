package reaper

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary re-executes itself as a child helper when this variable
// is set, so no shell is needed.
const helperEnv = "REAPER_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "exit":
		code, _ := strconv.Atoi(os.Args[1])
		os.Exit(code)
	case "orphans":
		// Start n children that outlive us, then exit: they are
		// re-parented to the nearest subreaper.
		n, _ := strconv.Atoi(os.Args[1])
		for i := 0; i < n; i++ {
			p, err := os.StartProcess("/proc/self/exe", []string{"x", "0"}, &os.ProcAttr{
				Env: []string{helperEnv + "=sleep"},
			})
			if err != nil {
				os.Exit(2)
			}
			_ = p.Release()
		}
		os.Exit(0)
	case "sleep":
		time.Sleep(100 * time.Millisecond)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func startHelper(t *testing.T, r *Reaper, tag any, kind string, arg int) int {
	t.Helper()
	pid, err := r.Start(tag, func() (int, error) {
		p, err := os.StartProcess("/proc/self/exe", []string{"x", strconv.Itoa(arg)}, &os.ProcAttr{
			Env:   []string{helperEnv + "=" + kind},
			Files: []*os.File{nil, os.Stderr, os.Stderr},
		})
		if err != nil {
			return 0, err
		}
		pid := p.Pid
		return pid, p.Release()
	})
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// drainChildren waits for every child of the test process to exit and
// reaps it.
func drainChildren() {
	for {
		if _, err := unix.Wait4(-1, nil, 0, nil); err == unix.ECHILD {
			return
		}
	}
}

// zombiesOf counts ppid's zombie children. A multi-threaded child (the Go
// helpers) shows as a zombie as soon as its main thread has exited, but
// wait4 cannot collect it until its last thread has (the kernel delays a
// thread-group leader); reapable counts only those wait4 can collect.
func zombiesOf(t *testing.T, ppid int) int { return countZombies(t, ppid, false) }

func reapableZombiesOf(t *testing.T, ppid int) int { return countZombies(t, ppid, true) }

func countZombies(t *testing.T, ppid int, reapable bool) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		// Field 20 of stat (num_threads) is f[17] here.
		if f[0] == "Z" && f[1] == strconv.Itoa(ppid) && (!reapable || f[17] == "1") {
			n++
		}
	}
	return n
}

// Exit codes of registered children come back exactly, each once, even when
// many exits coalesce into few SIGCHLDs.
func TestReapCollectsEveryRegisteredExit(t *testing.T) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	defer signal.Stop(sig)
	r := New()
	want := map[int]int{}
	for code := 0; code < 256; code += 5 {
		pid := startHelper(t, r, code, "exit", code)
		want[pid] = code
	}
	got := map[int]int{}
	deadline := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case <-sig:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("collected %d of %d exits", len(got), len(want))
		}
		for _, e := range r.Reap() {
			if _, dup := got[e.Pid]; dup {
				t.Fatalf("exit of %d reported twice", e.Pid)
			}
			got[e.Pid] = e.Status.ExitStatus()
			if e.Tag.(int) != got[e.Pid] {
				t.Fatalf("pid %d tag %v, code %d", e.Pid, e.Tag, got[e.Pid])
			}
		}
	}
	for pid, code := range want {
		if got[pid] != code {
			t.Fatalf("pid %d: got %d want %d", pid, got[pid], code)
		}
	}
	if r.Running() != 0 {
		t.Fatalf("%d still registered", r.Running())
	}
}

// Orphans re-parented to a subreaper are reaped; the negative control shows
// they stay zombies of the subreaper when nobody reaps.
func TestReapCollectsOrphans(t *testing.T) {
	if err := SetSubreaper(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) }()
	self := os.Getpid()
	// Children an earlier test left would count as this one's orphans.
	drainChildren()
	r := New()
	startHelper(t, r, "spawner", "orphans", 50)

	// Negative control: without reaping, the orphans end as our zombies.
	// The helpers are this test binary: under -race each takes long to
	// start, and 50 of them on a loaded 2-CPU machine took more than the
	// 10 s this waited before (the test was red under -race for that
	// alone), so the bound is generous; it only bounds a hang.
	deadline := time.Now().Add(2 * time.Minute)
	for reapableZombiesOf(t, self) < 51 {
		if time.Now().After(deadline) {
			t.Fatalf("control: expected 51 zombies, saw %d", reapableZombiesOf(t, self))
		}
		time.Sleep(20 * time.Millisecond)
	}
	exits := r.Reap()
	if len(exits) != 1 || exits[0].Tag != "spawner" {
		t.Fatalf("registered exits: %+v", exits)
	}
	if n := zombiesOf(t, self); n != 0 {
		t.Fatalf("%d zombies left after Reap", n)
	}
	if r.Orphans() != 50 {
		t.Fatalf("reaped %d orphans, want 50", r.Orphans())
	}
}

func TestWaitAllDrains(t *testing.T) {
	r := New()
	startHelper(t, r, "a", "exit", 3)
	startHelper(t, r, "b", "sleep", 0)
	exits := r.WaitAll()
	if len(exits) != 2 {
		t.Fatalf("exits %+v", exits)
	}
	if _, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); err != unix.ECHILD {
		t.Fatalf("children left: %v", err)
	}
}

// waitWakeup waits for one report on c, or fails.
func waitWakeup(t *testing.T, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit reported in 10s")
	}
}

// Wakeup wakes the caller at each child's exit, the first child started
// after the process had none included, and it does not spin once
// everything is reaped.
func TestWakeupReportsExits(t *testing.T) {
	r := New()
	// Nothing of an earlier test may be left to wake us.
	drainChildren()
	exited := r.Wakeup()
	// The first wake-up comes at once: for what exited before.
	waitWakeup(t, exited)
	if got := r.Reap(); len(got) != 0 {
		t.Fatalf("exits before any child: %+v", got)
	}
	for _, code := range []int{7, 9} {
		pid := startHelper(t, r, code, "exit", code)
		waitWakeup(t, exited)
		var got []Exit
		for deadline := time.Now().Add(10 * time.Second); len(got) == 0; {
			// The report may precede the Go helper's last thread
			// (see zombiesOf): collect until its exit is in.
			got = append(got, r.Reap()...)
			if len(got) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("exit of %d reported but not reaped", pid)
				}
				select {
				case <-exited:
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		if len(got) != 1 || got[0].Pid != pid || got[0].Status.ExitStatus() != code {
			t.Fatalf("exits %+v, want pid %d code %d", got, pid, code)
		}
	}
	wakes := 0
	for end := time.After(300 * time.Millisecond); ; {
		select {
		case <-exited:
			wakes++
			r.Reap()
			continue
		case <-end:
		}
		break
	}
	if wakes > 2 {
		t.Fatalf("%d wake-ups in 300ms with no child exiting: the wake-up spins", wakes)
	}
}

// An exit from before Wakeup was called is reported too: its SIGCHLD
// came before the handler, and the first wake-up is at once.
func TestWakeupSeesAnExitFromBeforeItStarted(t *testing.T) {
	r := New()
	pid := startHelper(t, r, "early", "exit", 3)
	for deadline := time.Now().Add(10 * time.Second); reapableZombiesOf(t, os.Getpid()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the helper did not exit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitWakeup(t, r.Wakeup())
	got := r.Reap()
	if len(got) != 1 || got[0].Pid != pid || got[0].Status.ExitStatus() != 3 {
		t.Fatalf("exits %+v", got)
	}
}

// startUnregistered starts a helper the reaper does not know of, as a
// set-up process's clone is until its pid is reported.
func startUnregistered(t *testing.T, code int) int {
	t.Helper()
	p, err := os.StartProcess("/proc/self/exe", []string{"x", strconv.Itoa(code)}, &os.ProcAttr{
		Env:   []string{helperEnv + "=exit"},
		Files: []*os.File{nil, os.Stderr, os.Stderr},
	})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid
	_ = p.Release()
	return pid
}

// A child claimed after its exit was collected gets that exit, with its
// code; one claimed before is registered and its exit comes from Reap;
// outside a window Expect opened, an unregistered child's exit is an
// orphan's, and its claim finds nothing. The negative control is the
// last case: without the window the exit is gone.
func TestClaim(t *testing.T) {
	drainChildren()
	self := os.Getpid()
	waitReapable := func(n int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for reapableZombiesOf(t, self) < n {
			if time.Now().After(deadline) {
				t.Fatalf("want %d zombies, saw %d", n, reapableZombiesOf(t, self))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Run("after its exit", func(t *testing.T) {
		r := New()
		r.Expect()
		pid := startUnregistered(t, 7)
		waitReapable(1)
		if got := r.Reap(); len(got) != 0 {
			t.Fatalf("Reap returned %+v", got)
		}
		e, ok := r.Claim(pid, "app")
		if !ok || e.Pid != pid || e.Tag != "app" || e.Status.ExitStatus() != 7 {
			t.Fatalf("claim: %+v %v", e, ok)
		}
		if r.Orphans() != 0 || r.Registered(pid) {
			t.Fatalf("orphans %d, registered %v", r.Orphans(), r.Registered(pid))
		}
		r.Unexpect()
	})
	t.Run("before its exit", func(t *testing.T) {
		r := New()
		r.Expect()
		// A child that is still alive: claimed, it is registered.
		p, err := os.StartProcess("/proc/self/exe", []string{"x"}, &os.ProcAttr{
			Env: []string{helperEnv + "=sleep"}, Files: []*os.File{nil, os.Stderr, os.Stderr},
		})
		must(t, err)
		pid := p.Pid
		_ = p.Release()
		if _, ok := r.Claim(pid, "app"); ok || !r.Registered(pid) {
			t.Fatalf("claim of a live child: ok %v, registered %v", ok, r.Registered(pid))
		}
		r.Unexpect()
		deadline := time.Now().Add(time.Minute)
		for {
			if got := r.Reap(); len(got) == 1 && got[0].Pid == pid && got[0].Tag == "app" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("its exit never came")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("no window", func(t *testing.T) {
		r := New()
		pid := startUnregistered(t, 7)
		waitReapable(1)
		r.Reap()
		r.Expect()
		defer r.Unexpect()
		if e, ok := r.Claim(pid, "app"); ok {
			t.Fatalf("claim outside a window: %+v", e)
		}
		r.Forget(pid)
		if r.Orphans() != 1 {
			t.Fatalf("orphans %d", r.Orphans())
		}
	})
	t.Run("window closed", func(t *testing.T) {
		r := New()
		r.Expect()
		pid := startUnregistered(t, 7)
		waitReapable(1)
		r.Reap()
		r.Unexpect()
		r.Expect()
		defer r.Unexpect()
		if e, ok := r.Claim(pid, "app"); ok {
			t.Fatalf("claim after the window closed: %+v", e)
		}
		r.Forget(pid)
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A child not registered, collected while a claim is expected, keeps the
// pid it saw as its own (in a pid namespace of its own here: 1), read
// before its exit was collected.
func TestKeptExitKeepsItsInnermostPid(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a new pid namespace needs root")
	}
	r := New()
	r.Expect()
	defer r.Unexpect()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"x", "0"}, &syscall.ProcAttr{
		Env: []string{helperEnv + "=exit"},
		Sys: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID},
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !r.Kept(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		r.Reap()
	}
	if !r.Kept(pid) {
		t.Fatalf("the exit of %d was not kept", pid)
	}
	if got := r.KeptNSPid(pid); got != 1 {
		t.Errorf("kept NSPid %d, want 1", got)
	}
	if e, ok := r.Claim(pid, "x"); !ok || e.NSPid != 1 {
		t.Errorf("claim: %+v %v", e, ok)
	}
}
