package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/status"
)

func record(t *testing.T, p *Pod, app string) *status.Record {
	t.Helper()
	r, err := status.ReadRecord(p.statusDir(), app)
	if err != nil {
		t.Fatalf("record of %s: %v", app, err)
	}
	return r
}

// runTimes reads the start times an app appended to file, one per run.
func runTimes(t *testing.T, file string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("runs: %v", err)
	}
	var out []time.Time
	for _, l := range strings.Fields(string(b)) {
		n, err := strconv.ParseInt(l, 10, 64)
		must(t, err)
		out = append(out, time.Unix(0, n))
	}
	return out
}

func volume(dir string) ([]map[string]any, []map[string]any) {
	return []map[string]any{{"name": "vol", "path": "/vol"}},
		[]map[string]any{{"name": "vol", "kind": "host", "source": dir}}
}

// A crash loop stops at exactly the start limit; the plain status appears
// only then (never while a restart is still to come), with the restart
// count in the JSON record.
func TestCrashLoopStopsAtStartLimit(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	p := newPod(t, []App{{Name: "loop", Exec: probe("append", "/vol/runs", "+", "exit", "1"), MPoints: mp,
		Annotations: map[string]string{"pod1/restart-policy": "on-failure", "pod1/restart-backoff": "20ms", "pod1/start-limit-burst": "4", "pod1/start-limit-interval": "1h"}}}, vols)
	r := start(t, p, RunOpts{})
	runsAtStatus := -1
	waitFor(t, 20*time.Second, "plain status", func() bool {
		if p.Status(t, "loop") == -1 {
			return false
		}
		runsAtStatus = len(runTimes(t, filepath.Join(vol, "runs")))
		return true
	})
	if code := r.Wait(t); code != 1 {
		t.Fatalf("pod exit %d; stderr %s", code, r.Stderr)
	}
	runs := runTimes(t, filepath.Join(vol, "runs"))
	if len(runs) != 4 || runsAtStatus != 4 {
		t.Fatalf("ran %d times (%d when the status appeared), want exactly 4", len(runs), runsAtStatus)
	}
	rec := record(t, p, "loop")
	if rec.State != status.StateExited || rec.RestartCount != 3 || rec.ExitCode == nil || *rec.ExitCode != 1 || rec.LastFailure != status.ReasonExit {
		t.Fatalf("record %+v", rec)
	}
	if rec.StartedAt == nil || rec.FinishedAt == nil || rec.FinishedAt.Before(*rec.StartedAt) {
		t.Fatalf("times %v %v", rec.StartedAt, rec.FinishedAt)
	}
	if !strings.Contains(r.Stderr.String(), `app "loop": start limit hit (4 starts within 1h0m0s)`) {
		t.Errorf("no start limit message: %q", r.Stderr)
	}
}

func TestRestartPolicies(t *testing.T) {
	cases := []struct {
		policy  string
		code    string
		runs    int
		podCode int
	}{
		{"on-failure", "0", 1, 0},
		{"never", "1", 1, 1},
		{"always", "0", 3, 0},
		{"always", "2", 3, 2},
	}
	for _, c := range cases {
		t.Run(c.policy+"-exit-"+c.code, func(t *testing.T) {
			vol := t.TempDir()
			mp, vols := volume(vol)
			p := newPod(t, []App{{Name: "a", Exec: probe("append", "/vol/runs", "+", "exit", c.code), MPoints: mp,
				Annotations: map[string]string{"pod1/restart-policy": c.policy, "pod1/restart-backoff": "10ms", "pod1/start-limit-burst": "3", "pod1/start-limit-interval": "1h"}}}, vols)
			r := runPod(t, p, RunOpts{})
			if r.Code != c.podCode {
				t.Fatalf("pod exit %d, want %d; stderr %s", r.Code, c.podCode, r.Stderr)
			}
			if n := len(runTimes(t, filepath.Join(vol, "runs"))); n != c.runs {
				t.Fatalf("ran %d times, want %d", n, c.runs)
			}
			if rec := record(t, p, "a"); rec.RestartCount != c.runs-1 {
				t.Fatalf("restart count %d, want %d", rec.RestartCount, c.runs-1)
			}
		})
	}
}

// Restarts are spaced by a doubling backoff: assert lower bounds only. A
// run lasting backoff-max resets the backoff, so the cap is well above
// how long a run takes on a slow (emulated) machine.
func TestBackoffSpacing(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	p := newPod(t, []App{{Name: "a", Exec: probe("append", "/vol/runs", "+", "exit", "1"), MPoints: mp,
		Annotations: map[string]string{"pod1/restart-policy": "always", "pod1/restart-backoff": "50ms",
			"pod1/restart-backoff-max": "800ms", "pod1/start-limit-burst": "7", "pod1/start-limit-interval": "1h"}}}, vols)
	runPod(t, p, RunOpts{})
	runs := runTimes(t, filepath.Join(vol, "runs"))
	if len(runs) != 7 {
		t.Fatalf("ran %d times", len(runs))
	}
	want := []time.Duration{50, 100, 200, 400, 800, 800}
	for i, w := range want {
		if d := runs[i+1].Sub(runs[i]); d < w*time.Millisecond {
			t.Errorf("gap %d is %v, want at least %v", i, d, w*time.Millisecond)
		}
	}
}

// What a run left behind (daemons it forked) is gone before the next run
// starts, and when an app finishes while the pod goes on.
func TestRestartStartsClean(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	p := newPod(t, []App{{Name: "a", Exec: probe("procs", "+", "orphans", "3", "1h", "+", "append", "/vol/runs", "+", "exit", "1"), MPoints: mp,
		Annotations: map[string]string{"pod1/restart-policy": "on-failure", "pod1/restart-backoff": "10ms", "pod1/start-limit-burst": "3", "pod1/start-limit-interval": "1h"}}}, vols)
	r := runPod(t, p, RunOpts{})
	ls := r.Lines("procs ")
	if len(ls) != 3 {
		t.Fatalf("procs lines %q; stderr %s", ls, r.Stderr)
	}
	for i, l := range ls {
		// PID 1 and the app itself: nothing of the previous run.
		if l != "procs 2" {
			t.Errorf("run %d saw %q", i, l)
		}
	}
	p2 := newPod(t, []App{
		{Name: "leaver", Exec: probe("orphans", "3", "1h", "+", "exit", "0")},
		{Name: "watcher", Exec: probe("sleep", "500ms", "+", "procs")},
	}, nil)
	r2 := runPod(t, p2, RunOpts{})
	if got := r2.Line(t, "procs "); got != "procs 2" {
		t.Fatalf("a finished app's daemons survived it: %q", got)
	}
}

// An app that ignores SIGTERM is killed when its grace period is over;
// one that handles SIGTERM records its own code. The pod stopped them
// because an app failed: the one the pod's SIGKILL ended records 0 in its
// status file, as rkt's stage1 records it, and 137 in its record.
func TestGracePeriod(t *testing.T) {
	p := newPod(t, []App{
		{Name: "stubborn", Exec: probe("ignore-term", "+", "sleep", "1h"), Annotations: map[string]string{"pod1/stop-grace-period": "300ms"}},
		{Name: "polite", Exec: probe("term-exit", "42", "+", "sleep", "1h")},
		{Name: "failing", Exec: probe("sleep", "300ms", "+", "exit", "2")},
	}, nil)
	t0 := time.Now()
	r := runPod(t, p, RunOpts{})
	d := time.Since(t0)
	if r.Code != 2 {
		t.Fatalf("pod exit %d; stderr %s", r.Code, r.Stderr)
	}
	// At least the failure's 300 ms and the grace period's (a slow
	// machine only adds to it); that the grace period was the app's own
	// and not the default (10 s) PID 1 says when it is over, whatever the
	// time it took.
	if d < 600*time.Millisecond {
		t.Errorf("pod took %v, want the 300ms grace period after the 300ms failure", d)
	}
	t.Logf("the pod took %v", d)
	if !strings.Contains(r.Stderr.String(), `app "stubborn": grace period of 300ms over, killing it`) {
		t.Errorf("no line of the stubborn app's 300ms grace period: %s", r.Stderr)
	}
	want := map[string]int{"stubborn": 0, "polite": 42, "failing": 2}
	for a, c := range want {
		if got := p.Status(t, a); got != c {
			t.Errorf("%s: status %d, want %d", a, got, c)
		}
	}
	if rec, err := status.ReadRecord(p.statusDir(), "stubborn"); err != nil || rec.ExitCode == nil || *rec.ExitCode != 137 || rec.Signal != "SIGKILL" || !rec.StoppedByPod {
		t.Errorf("stubborn's record: %+v, %v; want 137 by SIGKILL, stopped by the pod", rec, err)
	}
}

// 200 apps exiting within the same millisecond all get their status.
func TestSimultaneousExits(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	must(t, unix.Mkfifo(filepath.Join(vol, "go"), 0o644))
	must(t, unix.Mkfifo(filepath.Join(vol, "stop"), 0o644))
	apps := []App{{Name: "main", Exec: probe("wait-fifo", "/vol/stop"), MPoints: mp}}
	for i := 0; i < 200; i++ {
		apps = append(apps, App{Name: "x" + strconv.Itoa(i), Exec: probe("wait-fifo", "/vol/go", "+", "exit", "7"), MPoints: mp})
	}
	p := newPodRaw(t, manifestAnn(apps, vols, map[string]string{"pod1/exit-policy": "main-app", "pod1/main-app": "main"}), apps)
	r := start(t, p, RunOpts{})
	waitFor(t, 60*time.Second, "200 apps running", func() bool {
		ents, _ := os.ReadDir(p.statusDir())
		n := 0
		for _, e := range ents {
			// Not the reservations of the final writes (".<app>*.tmp").
			if !strings.HasPrefix(e.Name(), ".") {
				n++
			}
		}
		return n == 201
	})
	// Opening the FIFO for writing releases every app blocked in its
	// open at once; repeated, in case some had not got there yet.
	release := func(fifo string) {
		if f, err := os.OpenFile(filepath.Join(vol, fifo), os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}
	time.Sleep(200 * time.Millisecond)
	waitFor(t, 10*time.Second, "200 statuses", func() bool {
		release("go")
		for i := 0; i < 200; i++ {
			if p.Status(t, "x"+strconv.Itoa(i)) == -1 {
				return false
			}
		}
		return true
	})
	for i := 0; i < 200; i++ {
		if got := p.Status(t, "x"+strconv.Itoa(i)); got != 7 {
			t.Errorf("x%d: status %d", i, got)
		}
	}
	go func() {
		for {
			select {
			case <-r.done:
				return
			case <-time.After(10 * time.Millisecond):
				release("stop")
			}
		}
	}()
	if code := r.Wait(t); code != 0 {
		t.Fatalf("pod exit %d; stderr %s", code, r.Stderr)
	}
}

// 1000 fast-exiting runs with code 19: every exit the reaper reports is 19,
// never a false 0.
func TestThousandFastExitsNeverZero(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("exit", "19"), Annotations: map[string]string{
		"pod1/restart-policy": "always", "pod1/restart-backoff": "0s", "pod1/start-limit-burst": "1000", "pod1/start-limit-interval": "1h"}}}, nil)
	r := runPod(t, p, RunOpts{Args: []string{"--debug", "--net=none"}})
	if r.Code != 19 || p.Status(t, "a") != 19 {
		t.Fatalf("pod exit %d status %d", r.Code, p.Status(t, "a"))
	}
	ends := strings.Count(r.Stderr.String(), `] debug: app "a": pid `)
	n19 := strings.Count(r.Stderr.String(), ", code 19\n")
	if ends != 1000 || n19 != 1000 {
		var odd []string
		for _, l := range strings.Split(r.Stderr.String(), "\n") {
			if strings.Contains(l, `] debug: app "a": pid `) && !strings.HasSuffix(l, ", code 19") || strings.Contains(l, "warning") || strings.Contains(l, "stage1: app") {
				odd = append(odd, l)
			}
		}
		t.Fatalf("%d exits seen, %d with code 19, want 1000 of 1000: %q", ends, n19, odd)
	}
	if rec := record(t, p, "a"); rec.RestartCount != 999 {
		t.Fatalf("restart count %d", rec.RestartCount)
	}
}

// A fork bomb in one app, held by its pids limit, takes down neither PID 1
// nor the other apps, and every status is written at the end.
func TestForkBombContained(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	apps := []App{
		{Name: "bomb", Exec: probe("forkbomb"), Annotations: map[string]string{"pod1/pids-max": "64", "pod1/stop-grace-period": "1s"}},
		{Name: "steady", Exec: probe("sleep", "1s", "+", "touch", "/vol/alive", "+", "sleep", "1h"), MPoints: mp,
			Annotations: map[string]string{"pod1/stop-grace-period": "1s"}},
	}
	p := newPodRaw(t, manifestAnn(apps, vols, map[string]string{"pod1/exit-policy": "main-app", "pod1/main-app": "steady"}), apps)
	r := start(t, p, RunOpts{Args: []string{"--debug", "--net=none"}})
	initPid := podPid(t, p)
	defer func() {
		if t.Failed() {
			t.Logf("stderr: %s", r.Stderr)
		}
	}()
	waitFor(t, 30*time.Second, "the bomb to be held", func() bool {
		rec, err := status.ReadRecord(p.statusDir(), "bomb")
		return strings.Contains(r.Stdout.String(), "forkbomb stopped after") || err == nil && rec.State != status.StateRunning
	})
	waitFor(t, 10*time.Second, "the steady app to live on", func() bool {
		_, err := os.Stat(filepath.Join(vol, "alive"))
		return err == nil
	})
	if procState(initPid) == "" {
		t.Fatal("PID 1 died")
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	for _, a := range []string{"bomb", "steady"} {
		if p.Status(t, a) == -1 {
			t.Errorf("%s has no status", a)
		}
	}
	if p.Status(t, "steady") != 143 {
		t.Errorf("steady: status %d", p.Status(t, "steady"))
	}
}

func TestExitPolicies(t *testing.T) {
	t.Run("any-app", func(t *testing.T) {
		apps := []App{{Name: "a", Exec: probe("sleep", "100ms")}, {Name: "b", Exec: probe("sleep", "1h")}}
		p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/exit-policy": "any-app"}), apps)
		r := runPod(t, p, RunOpts{})
		if r.Code != 0 || p.Status(t, "a") != 0 || p.Status(t, "b") != 143 {
			t.Fatalf("exit %d, statuses %d %d; %s", r.Code, p.Status(t, "a"), p.Status(t, "b"), r.Stderr)
		}
	})
	t.Run("main-app", func(t *testing.T) {
		apps := []App{{Name: "side", Exec: probe("exit", "3")}, {Name: "web", Exec: probe("sleep", "300ms", "+", "exit", "4")}, {Name: "other", Exec: probe("sleep", "1h")}}
		p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/exit-policy": "main-app", "pod1/main-app": "web"}), apps)
		r := runPod(t, p, RunOpts{})
		if r.Code != 4 || p.Status(t, "side") != 3 || p.Status(t, "web") != 4 || p.Status(t, "other") != 143 {
			t.Fatalf("exit %d, statuses %d %d %d; %s", r.Code, p.Status(t, "side"), p.Status(t, "web"), p.Status(t, "other"), r.Stderr)
		}
	})
	t.Run("bad", func(t *testing.T) {
		for anns, want := range map[string]map[string]string{
			`pod1/exit-policy: "sometimes"`:       {"pod1/exit-policy": "sometimes"},
			`main-app needs annotation`:           {"pod1/exit-policy": "main-app"},
			`pod1/main-app: no app named "ghost"`: {"pod1/exit-policy": "main-app", "pod1/main-app": "ghost"},
		} {
			apps := []App{okApp("a")}
			p := newPodRaw(t, manifestAnn(apps, nil, want), apps)
			assertRefused(t, p, runPod(t, p, RunOpts{}), anns)
		}
	})
}

func TestBadSupervisionAnnotations(t *testing.T) {
	cases := map[string]string{
		"pod1/restart-policy":    "sometimes",
		"pod1/restart-backoff":   "-1s",
		"pod1/start-limit-burst": "0",
		"pod1/stop-grace-period": "forever",
		"pod1/pids-max":          "x",
	}
	for k, v := range cases {
		t.Run(k, func(t *testing.T) {
			apps := []App{{Name: "a", Exec: probe("exit", "0"), Annotations: map[string]string{k: v}}}
			p := newPod(t, apps, nil)
			assertRefused(t, p, runPod(t, p, RunOpts{}), `app "a": annotations: annotation `+k)
		})
	}
}

// Apps start with an empty signal mask and no ignored signals, even when
// the stage1 was started with some ignored (nohup) and though PID 1 and run
// ignore most signals themselves: the first app (PID 1's spare process)
// and the second (started the usual way) alike.
func TestAppsStartWithCleanSignalState(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("status")}, {Name: "b", Exec: probe("status")}}, nil)
	r := runPod(t, p, RunOpts{Wrapper: []string{"nohup"}})
	for _, want := range []string{"status SigBlk: 0000000000000000", "status SigIgn: 0000000000000000"} {
		if n := strings.Count(r.Stdout.String(), want+"\n"); n != 2 {
			t.Errorf("%q %d times in %q, want 2", want, n, r.Lines("status Sig"))
		}
	}
}

// Apps that end while PID 1 is still emptying another app's cgroup are not
// lost: that cleanup reaps them, and their ends are handled like any other.
// Eight apps, each with twenty daemons, all end at once on a stop; before
// the fix one of them was regularly dropped and the pod never ended.
func TestExitsDuringAnotherAppsCleanupAreKept(t *testing.T) {
	for round := 0; round < 4; round++ {
		vol := t.TempDir()
		mp, vols := volume(vol)
		var apps []App
		for i := 0; i < 8; i++ {
			n := "a" + strconv.Itoa(i)
			apps = append(apps, App{Name: n, Exec: probe("spawn", "20", "600s", "+", "touch", "/vol/"+n, "+", "sleep", "600s"), MPoints: mp})
		}
		p := newPod(t, apps, vols)
		r := start(t, p, RunOpts{Args: []string{"--debug", "--net=none"}})
		waitFor(t, 20*time.Second, "every app's daemons", func() bool {
			for _, a := range apps {
				if _, err := os.Stat(filepath.Join(vol, a.Name)); err != nil {
					return false
				}
			}
			return true
		})
		must(t, r.Cmd.Process.Signal(unix.SIGTERM))
		r.Wait(t)
		for _, a := range apps {
			if got := p.Status(t, a.Name); got != 143 {
				t.Fatalf("round %d: %s: status %d; stderr %s", round, a.Name, got, r.Stderr)
			}
		}
	}
}

// children lists a process's children (every thread's), but pod1-pause,
// which a pod's PID 1 has for the pod's whole life.
func children(t *testing.T, pid int) []string {
	t.Helper()
	var out []string
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	must(t, err)
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			if comm, _ := os.ReadFile("/proc/" + c + "/comm"); strings.TrimSpace(string(comm)) != "pod1-pause" {
				out = append(out, c)
			}
		}
	}
	return out
}

// PID 1 starts an app process ahead of its configuration for the first
// app (stage1-init/pid1/spare.go). When no app takes it (a mutable pod starts
// with none; an app in a user namespace starts its own way), it is gone
// once the pod is ready, without a word on stderr; when the first app takes
// it, it is that app, in that app's cgroup.
func TestSpareAppProcessLeavesNoTrace(t *testing.T) {
	t.Run("sandbox", func(t *testing.T) {
		p, r := sandbox(t, nil)
		pid := podPid(t, p)
		// At once: the pod said it is ready.
		if c := children(t, pid); len(c) != 0 {
			t.Errorf("PID 1's children once the sandbox is ready: %v", c)
		}
		if e := errorLines(r.Stderr.String()); len(e) != 0 {
			t.Errorf("error lines %q; stderr: %s", e, r.Stderr)
		}
	})
	t.Run("private-users", func(t *testing.T) {
		p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
		shiftOwnership(t, p, usersBase)
		r := start(t, p, RunOpts{Args: []string{"--net=none", privateUsers}})
		app := appPid(t, p, "a")
		pid := podPid(t, p)
		waitFor(t, 5*time.Second, "PID 1's only child to be the app", func() bool {
			c := children(t, pid)
			return len(c) == 1 && c[0] == strconv.Itoa(app)
		})
		if e := errorLines(r.Stderr.String()); len(e) != 0 {
			t.Errorf("error lines %q; stderr: %s", e, r.Stderr)
		}
	})
	t.Run("taken", func(t *testing.T) {
		p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}, {Name: "b", Exec: probe("sleep", "1h")}}, nil)
		start(t, p, RunOpts{})
		for _, name := range []string{"a", "b"} {
			app := appPid(t, p, name)
			b, err := os.ReadFile("/proc/" + strconv.Itoa(app) + "/cgroup")
			must(t, err)
			if !strings.Contains(string(b), "/"+cgroups.PodName(p.UUID)+"/apps/app-"+name+"\n") {
				t.Errorf("app %s is not in its cgroup:\n%s", name, b)
			}
		}
		// Each app's set-up process ends once its app has exec'd.
		waitFor(t, eventDeadline, "PID 1's children to be the two apps", func() bool { return len(children(t, podPid(t, p))) == 2 })
	})
}

// errorLines returns the lines of a stage1's stderr that are errors: every
// line that is not a debug, info or warning line of some role (logx prints
// an error as "stage1: <why>", with no role, as rkt's stage1 does).
func errorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l == "" || roleLine.MatchString(l) {
			continue
		}
		out = append(out, l)
	}
	return out
}

var roleLine = regexp.MustCompile(`^stage1: [a-z0-9-]+\[[0-9]+\] (debug|info|warning): `)
