package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// sandbox starts a mutable pod with no apps, as `rkt app sandbox` does,
// and waits until it accepts app operations.
func sandbox(t *testing.T, vols []map[string]any) (*Pod, *Run) {
	t.Helper()
	raw := manifest(nil, vols)
	p := newPodRaw(t, raw, nil)
	must(t, os.WriteFile(filepath.Join(p.Dir, "pod.lck"), nil, 0o600))
	r := start(t, p, RunOpts{Args: []string{"--debug", "--net=none", "--local-config=/etc/rkt", "--mutable"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stage1 stderr:\n%s", r.Stderr)
		}
	})
	// Runs before start's cleanup (which kills the stage1): stop the pod
	// as a user would. A pod the test already stopped ignores it.
	t.Cleanup(func() {
		stop := exec.Command(filepath.Join(p.Dir, layout.Stage1RootFS, "stop"), p.UUID)
		stop.Dir = p.Dir
		_ = stop.Run()
		r.Wait(t)
	})
	waitFor(t, 10*time.Second, "supervisor ready", func() bool {
		l, err := os.Readlink(filepath.Join(p.Dir, layout.SupervisorStatus))
		return err == nil && l == "ready"
	})
	return p, r
}

// entry runs an app entry point as stage0 does (contract §7): a child
// with cwd = pod dir and only the crossing variables in its environment.
func entry(t *testing.T, p *Pod, ep string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(p.Dir, layout.Stage1RootFS, ep), args...)
	cmd.Dir = p.Dir
	cmd.Env = []string{"RKT_STAGE1_ENTERCMD=" + filepath.Join(p.Dir, layout.Stage1RootFS, "enter"),
		"RKT_STAGE1_ENTERPID=" + fmt.Sprint(podPid(t, p)), "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.WaitDelay = time.Second
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(eventDeadline):
			_ = cmd.Process.Kill()
		}
	}()
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", ep, err)
	}
	return code, string(out)
}

// addApp does stage0's part of `rkt app add` (render the app, rewrite the
// pod manifest, the -created marker) and calls app/add.
func addApp(t *testing.T, p *Pod, a App) (int, string) {
	t.Helper()
	root := filepath.Join(p.Dir, layout.AppRootfs(a.Name))
	must(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	_ = os.Remove(filepath.Join(root, "bin/probe"))
	copyFile(t, bin("probe"), filepath.Join(root, "bin/probe"))
	must(t, os.WriteFile(filepath.Join(root, "..", "manifest"), imageManifest(a.Name), 0o644))
	var pm map[string]any
	b, err := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, err)
	must(t, json.Unmarshal(b, &pm))
	var cur map[string]any
	must(t, json.Unmarshal(manifestAnn([]App{a}, nil, nil), &cur))
	apps, _ := pm["apps"].([]any)
	pm["apps"] = append(apps, cur["apps"].([]any)[0])
	b, _ = json.Marshal(pm)
	must(t, os.WriteFile(filepath.Join(p.Dir, "pod.tmp"), b, 0o640))
	must(t, os.Rename(filepath.Join(p.Dir, "pod.tmp"), filepath.Join(p.Dir, layout.PodManifest)))
	must(t, os.WriteFile(filepath.Join(p.statusDir(), a.Name+"-created"), nil, 0o644))
	return entry(t, p, "app-add", "--debug=false", "--uuid="+p.UUID, "--app="+a.Name)
}

func startApp(t *testing.T, p *Pod, name string) (int, string) {
	t.Helper()
	_ = os.Remove(filepath.Join(p.statusDir(), name+"-started"))
	_ = os.Remove(filepath.Join(p.statusDir(), name))
	must(t, os.WriteFile(filepath.Join(p.statusDir(), name+"-started"), nil, 0o644))
	return entry(t, p, "app-start", "--debug=false", "--app="+name)
}

// rmApp does what stage0's `rkt app rm` does around app/stop and app/rm.
func rmApp(t *testing.T, p *Pod, name string) (int, string) {
	t.Helper()
	if code, out := entry(t, p, "app-stop", "--debug=false", "--app="+name); code != 0 && code != 5 {
		return code, out
	}
	code, out := entry(t, p, "app-rm", "--debug=false", "--app="+name)
	if code != 0 {
		return code, out
	}
	must(t, os.RemoveAll(filepath.Join(p.Dir, layout.Stage2Dir, name)))
	_ = os.Remove(filepath.Join(p.statusDir(), name))
	var pm map[string]any
	b, _ := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, json.Unmarshal(b, &pm))
	var keep []any
	for _, a := range pm["apps"].([]any) {
		if a.(map[string]any)["name"] != name {
			keep = append(keep, a)
		}
	}
	if keep == nil {
		keep = []any{}
	}
	pm["apps"] = keep
	b, _ = json.Marshal(pm)
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640))
	return 0, out
}

func recState(t *testing.T, p *Pod, app string) string {
	r, err := status.ReadRecord(p.statusDir(), app)
	if err != nil {
		return "none"
	}
	return r.State
}

// A rktlet-like sequence through the app entry points, with stage0's side
// done as rkt does it.
func TestMutablePodAppLifecycle(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	p, r := sandbox(t, vols)
	if len(nsMembers(pidNS(podPid(t, p)))) != 2 {
		t.Fatal("a sandbox runs only PID 1 and pod1-pause")
	}
	for _, a := range []App{
		{Name: "web", Exec: probe("touch", "/vol/web-ran", "+", "sleep", "1h"), MPoints: mp},
		{Name: "worker", Exec: probe("sleep", "1h")},
		{Name: "crashy", Exec: probe("append", "/vol/crashy", "+", "exit", "3"), MPoints: mp, Annotations: map[string]string{
			"pod1/restart-policy": "on-failure", "pod1/restart-backoff": "10ms", "pod1/start-limit-burst": "3", "pod1/start-limit-interval": "1h"}},
	} {
		if code, out := addApp(t, p, a); code != 0 {
			t.Fatalf("add %s: %d %s", a.Name, code, out)
		}
		if s := recState(t, p, a.Name); s != status.StateAdded {
			t.Fatalf("%s: state %s after add", a.Name, s)
		}
	}
	for _, n := range []string{"web", "worker", "crashy"} {
		if code, out := startApp(t, p, n); code != 0 {
			t.Fatalf("start %s: %d %s", n, code, out)
		}
	}
	waitFor(t, 10*time.Second, "web running", func() bool {
		_, err := os.Stat(filepath.Join(vol, "web-ran"))
		return err == nil
	})
	// The crash-looping app fails for good without ending the pod.
	waitFor(t, 10*time.Second, "crashy finished", func() bool { return p.Status(t, "crashy") == 3 })
	if n := len(runTimes(t, filepath.Join(vol, "crashy"))); n != 3 {
		t.Errorf("crashy ran %d times", n)
	}
	// Stop one: its status is written before app/stop returns.
	if code, out := entry(t, p, "app-stop", "--debug=false", "--app=worker"); code != 0 {
		t.Fatalf("stop worker: %d %s", code, out)
	}
	if got := p.Status(t, "worker"); got != 143 || recState(t, p, "worker") != status.StateExited {
		t.Fatalf("worker after stop: status %d, state %s", got, recState(t, p, "worker"))
	}
	// Stopping it again is done at once and changes nothing (rkt's
	// stage0 fails app stop and app rm on any other code).
	if code, out := entry(t, p, "app-stop", "--debug=false", "--app=worker"); code != 0 || !strings.Contains(out, "not running") {
		t.Fatalf("stopping a stopped app: exit %d, want 0: %s", code, out)
	}
	if got := p.Status(t, "worker"); got != 143 || recState(t, p, "worker") != status.StateExited {
		t.Fatalf("worker after a second stop: status %d, state %s", got, recState(t, p, "worker"))
	}
	// Remove one that runs: nothing of it is left.
	if code, out := rmApp(t, p, "web"); code != 0 {
		t.Fatalf("rm web: %d %s", code, out)
	}
	for _, f := range []string{"web.json", "web"} {
		if _, err := os.Lstat(filepath.Join(p.statusDir(), f)); err == nil {
			t.Errorf("status/%s left after rm", f)
		}
	}
	if _, err := os.Stat(filepath.Join(p.Dir, layout.AppSpec("web"))); err == nil {
		t.Error("spec left after rm")
	}
	if m := podCgroupsGlob(p, "apps/app-web"); len(m) != 0 {
		t.Errorf("cgroups left after rm: %v", m)
	}
	// Re-add the name: it starts clean.
	must(t, os.Remove(filepath.Join(vol, "web-ran")))
	if code, out := addApp(t, p, App{Name: "web", Exec: probe("touch", "/vol/web-ran", "+", "exit", "0"), MPoints: mp}); code != 0 {
		t.Fatalf("re-add web: %d %s", code, out)
	}
	if p.Status(t, "web") != -1 {
		t.Fatal("re-added app has an old status")
	}
	if code, out := startApp(t, p, "web"); code != 0 {
		t.Fatalf("start web again: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "web's second life", func() bool { return p.Status(t, "web") == 0 })
	if rec, _ := status.ReadRecord(p.statusDir(), "web"); rec == nil || rec.RestartCount != 0 {
		t.Errorf("re-added web record: %+v", rec)
	}
	// Bad operations fail with one line.
	if code, out := entry(t, p, "app-start", "--debug=false", "--app=ghost"); code != 254 || !strings.Contains(out, `no app named "ghost"`) {
		t.Errorf("start ghost: %d %q", code, out)
	}
	// The pod stays up with every app finished, until stopped. PID 1
	// decides whether the pod is over after each event it handles, before
	// it takes the next app operation: an operation answered after the
	// last app finished (web's status written) shows that it decided to
	// stay, with no fixed sleep that a wrong decision could outlast.
	if code, out := entry(t, p, "app-stop", "--debug=false", "--app=web"); code != 0 || !strings.Contains(out, "not running") {
		t.Fatalf("the sandbox did not answer once its apps had finished: exit %d: %s", code, out)
	}
	if !locked(t, p.Dir) {
		t.Fatal("the sandbox ended by itself")
	}
	stop := exec.Command(filepath.Join(p.Dir, layout.Stage1RootFS, "stop"), p.UUID)
	stop.Dir = p.Dir
	must(t, stop.Run())
	if code := r.Wait(t); code != 0 {
		t.Fatalf("pod exit %d: %s", code, r.Stderr)
	}
}

// No app can reach the control socket, whatever its capabilities: the
// path is outside its root, and a peer inside the pod is refused anyway.
func TestControlChannelRefusesApps(t *testing.T) {
	p, r := sandbox(t, nil)
	// A process inside the pod's namespaces that can see the socket (a
	// bind of it into an app's root) is still refused.
	sock := filepath.Join(p.Dir, layout.ControlSocket)
	a := App{Name: "intruder", Exec: probe("connect", "/ctl.sock"),
		MPoints: []map[string]any{{"name": "ctl", "path": "/ctl.sock"}}}
	root := filepath.Join(p.Dir, layout.AppRootfs(a.Name))
	must(t, os.MkdirAll(root, 0o755))
	var pm map[string]any
	b, _ := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, json.Unmarshal(b, &pm))
	pm["volumes"] = []any{map[string]any{"name": "ctl", "kind": "host", "source": sock}}
	b, _ = json.Marshal(pm)
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640))
	if code, out := addApp(t, p, a); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := startApp(t, p, a.Name); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "intruder done", func() bool { return p.Status(t, a.Name) != -1 })
	if got := p.Status(t, a.Name); got != 0 {
		t.Fatalf("intruder status %d: %s", got, r.Stderr)
	}
	if !strings.Contains(r.Stdout.String(), "connect refused: ") || !strings.Contains(r.Stdout.String(), "is inside the pod") {
		t.Fatalf("intruder was not refused: %q", r.Lines("connect"))
	}
}

// An operation interrupted half-way is finished or undone by the next one:
// an add whose app/add never reached PID 1, a stop whose caller was
// killed while it waited, an rm whose app/rm never ran.
func TestInterruptedAppOperationsReconcile(t *testing.T) {
	p, r := sandbox(t, nil)
	// stage0 did its part of the add; its app/add caller died.
	a := App{Name: "orphan", Exec: probe("report-term", "+", "sleep", "1h"), Annotations: map[string]string{"pod1/stop-grace-period": "2s"}}
	addAppStage0Only(t, p, a)
	if code, out := startApp(t, p, "orphan"); code != 0 {
		t.Fatalf("start of a half-added app: %d %s", code, out)
	}
	waitFor(t, 5*time.Second, "orphan catching SIGTERM", func() bool { return strings.Contains(r.Stdout.String(), "report-term ready") })
	// app/stop's caller killed while it waits out the grace period: the
	// pod still finishes the stop. It is killed once the app has its
	// SIGTERM (the stop has reached PID 1), not after a fixed sleep, which
	// a slow machine (an emulated VM) outlasts.
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.Dir, layout.Stage1RootFS, "app-stop"), "--debug=false", "--app=orphan")
	cmd.Dir = p.Dir
	must(t, cmd.Start())
	waitFor(t, 10*time.Second, "the stop reaching the app", func() bool { return strings.Contains(r.Stdout.String(), "term received") })
	_ = cmd.Process.Kill() // it returns only after the 2 s grace period and the kill
	_ = cmd.Wait()
	waitFor(t, 5*time.Second, "the stop finished", func() bool { return p.Status(t, "orphan") == 137 })
	// stage0 dropped the app from the manifest but app/rm never ran: the
	// next operation removes it from the pod.
	dropFromManifest(t, p, "orphan")
	if code, out := addApp(t, p, App{Name: "next", Exec: probe("exit", "0")}); code != 0 {
		t.Fatalf("add next: %d %s", code, out)
	}
	if s := recState(t, p, "orphan"); s != "none" {
		t.Fatalf("orphan still recorded: %s", s)
	}
}

func addAppStage0Only(t *testing.T, p *Pod, a App) {
	t.Helper()
	root := filepath.Join(p.Dir, layout.AppRootfs(a.Name))
	must(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	copyFile(t, bin("probe"), filepath.Join(root, "bin/probe"))
	must(t, os.WriteFile(filepath.Join(root, "..", "manifest"), imageManifest(a.Name), 0o644))
	var pm, cur map[string]any
	b, _ := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, json.Unmarshal(b, &pm))
	must(t, json.Unmarshal(manifestAnn([]App{a}, nil, nil), &cur))
	apps, _ := pm["apps"].([]any)
	pm["apps"] = append(apps, cur["apps"].([]any)[0])
	b, _ = json.Marshal(pm)
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640))
	must(t, os.WriteFile(filepath.Join(p.statusDir(), a.Name+"-created"), nil, 0o644))
}

func dropFromManifest(t *testing.T, p *Pod, name string) {
	t.Helper()
	var pm map[string]any
	b, _ := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, json.Unmarshal(b, &pm))
	keep := []any{}
	for _, a := range pm["apps"].([]any) {
		if a.(map[string]any)["name"] != name {
			keep = append(keep, a)
		}
	}
	pm["apps"] = keep
	b, _ = json.Marshal(pm)
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640))
}

// pid1Usage reads PID 1's mounts under the pod directory (the rest of its
// mount table follows the host's, where other tests mount and unmount),
// its fd count and its resident memory.
func pid1Usage(t *testing.T, pid int, podDir string) (mounts, fds, anonKB int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], podDir) {
			mounts++
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	must(t, err)
	fds = len(ents)
	// A leak is anonymous memory (heap, stacks); the binary's pages
	// come and go (PID 1 drops those an app operation faulted in just
	// after answering it, and they fault back as code runs). The heap
	// garbage goes at the same moment, so one reading may catch it
	// before: the lowest of a few over 300 ms is the floor a leak
	// raises.
	for i := 0; i < 30; i++ {
		b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		must(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
				if n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB")); anonKB == 0 || n < anonKB {
					anonKB = n
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return
}

// Nothing leaks across many add/start/stop/rm cycles: PID 1's mounts and
// fds are the same at the end as after the first cycle, its memory within
// a small bound, and no cgroup, record or spec of a removed app remains.
func TestManyAppCyclesLeakNothing(t *testing.T) {
	p, _ := sandbox(t, nil)
	pid := podPid(t, p)
	const cycles = 500
	var m1, f1, rss1, rssSettled int
	t0 := time.Now()
	for i := 0; i < cycles; i++ {
		a := App{Name: "cycle", Exec: probe("sleep", "1h")}
		if code, out := addApp(t, p, a); code != 0 {
			t.Fatalf("cycle %d add: %d %s", i, code, out)
		}
		if code, out := startApp(t, p, a.Name); code != 0 {
			t.Fatalf("cycle %d start: %d %s", i, code, out)
		}
		if code, out := rmApp(t, p, a.Name); code != 0 {
			t.Fatalf("cycle %d rm: %d %s", i, code, out)
		}
		if i == 0 {
			m1, f1, rss1 = pid1Usage(t, pid, p.Dir)
		}
		if i%100 == 99 {
			m, f, rss := pid1Usage(t, pid, p.Dir)
			t.Logf("after %d cycles: %d mounts, %d fds, %d kB anonymous", i+1, m, f, rss)
			if i+1 == 200 {
				rssSettled = rss
			}
		}
	}
	// An fd can be open for a moment after an rm's answer (a pipe or
	// a timer of the app's last run, closed on the loop's next turn): the
	// last count is the one PID 1 settles to, the first may hold one.
	var m, f, rss int
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, f, rss = pid1Usage(t, pid, p.Dir)
		if m <= m1 && f <= f1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d cycles in %v; PID 1 after the first: %d mounts, %d fds, %d kB; after the last: %d, %d, %d kB",
		cycles, time.Since(t0), m1, f1, rss1, m, f, rss)
	if m > m1 || f > f1 {
		t.Errorf("PID 1 leaks: mounts %d -> %d, fds %d -> %d", m1, m, f1, f)
	}
	// The Go heap grows to a plateau over the first cycles (in the
	// systemd VM 3992 kB after the first, 6256 from the 200th on): a
	// leak is growth that goes on, 3.4 kB a cycle and more over the
	// last 300.
	if rss > rssSettled+1024 || rss > rss1+4096 {
		t.Errorf("PID 1 anonymous memory grew from %d kB (first cycle) and %d kB (200th) to %d kB", rss1, rssSettled, rss)
	}
	if left := podCgroupsGlob(p, "apps/app-*"); len(left) != 0 {
		t.Errorf("cgroups left: %v", left)
	}
	ents, _ := os.ReadDir(p.statusDir())
	for _, e := range ents {
		if e.Name() != "cycle-created" && e.Name() != "cycle-started" {
			t.Errorf("status dir holds %s", e.Name())
		}
	}
}

// copyFile copies an executable: a mutable pod's opt/stage2 is a bind
// mount, and hard links cannot cross it.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o755))
}

// An app whose resource limits cannot be put on a cgroup does not run
// unlimited: its start fails. (The pod's cgroup is made unable to have
// more children, which is what the host would do to a pod out of cgroups.)
func TestLimitsThatCannotBeSetFailTheStart(t *testing.T) {
	p, _ := sandbox(t, nil)
	// The pod's cgroup in the v2 hierarchy, wherever the caller's own
	// cgroup put it (under a session scope on a systemd host): the one
	// with cgroup.controllers.
	var v2 []string
	for _, d := range cgroupDirs(p) {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			v2 = append(v2, d)
		}
	}
	if len(v2) != 1 {
		t.Skipf("no cgroup v2 hierarchy to constrain (the pod's cgroups: %v)", cgroupDirs(p))
	}
	// stage1/ is the one descendant it has; no app cgroup can be made.
	must(t, os.WriteFile(filepath.Join(v2[0], "cgroup.max.descendants"), []byte("1"), 0))
	a := App{Name: "limited", Exec: probe("sleep", "1h")}
	addAppStage0Only(t, p, a)
	// The app entry in the manifest gets a memory limit.
	var pm map[string]any
	b, _ := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, json.Unmarshal(b, &pm))
	for _, x := range pm["apps"].([]any) {
		app := x.(map[string]any)
		if app["name"] == "limited" {
			app["app"].(map[string]any)["isolators"] = []any{isolator("resource/memory", map[string]any{"limit": "64Mi"})}
		}
	}
	b, _ = json.Marshal(pm)
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640))
	if code, out := entry(t, p, "app-add", "--debug=false", "--uuid="+p.UUID, "--app=limited"); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	code, out := startApp(t, p, "limited")
	if code != 254 || !strings.Contains(out, "cgroup") {
		t.Fatalf("start of an app whose limits cannot be set: %d %q", code, out)
	}
	if got := recState(t, p, "limited"); got != status.StateExited {
		t.Fatalf("state %s", got)
	}
}

// app/stop --force of an app whose policy is to restart always stops it
// for good, as a graceful stop does: killed, status 137, never started
// again.
func TestForceStopOfARestartingAppIsFinal(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	p, _ := sandbox(t, vols)
	a := App{Name: "always", Exec: probe("append", "/vol/always", "+", "sleep", "1h"), MPoints: mp, Annotations: map[string]string{
		"pod1/restart-policy": "always", "pod1/restart-backoff": "10ms"}}
	if code, out := addApp(t, p, a); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := startApp(t, p, a.Name); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "the app's first run", func() bool {
		_, err := os.Stat(filepath.Join(vol, "always"))
		return err == nil
	})
	if code, out := entry(t, p, "app-stop", "--debug=false", "--force", "--app="+a.Name); code != 0 {
		t.Fatalf("stop --force: %d %s", code, out)
	}
	if got := p.Status(t, a.Name); got != 137 || recState(t, p, a.Name) != status.StateExited {
		t.Fatalf("after stop --force: status %d, state %s", got, recState(t, p, a.Name))
	}
	// A restart of it would be due at its end plus its backoff. A
	// witness app that ends after it, with the same backoff, restarts
	// only once PID 1's clock is past that: PID 1 fires every restart
	// that is due at once, and records a restarted app (restart count,
	// state) before it starts it. Once the witness has run twice, a
	// restart of the stopped app would show in its record, however slow
	// the machine.
	w := App{Name: "witness", Exec: probe("append", "/vol/witness", "+", "exit", "1"), MPoints: mp, Annotations: map[string]string{
		"pod1/restart-policy": "on-failure", "pod1/restart-backoff": "10ms", "pod1/start-limit-burst": "2", "pod1/start-limit-interval": "1h"}}
	if code, out := addApp(t, p, w); code != 0 {
		t.Fatalf("add witness: %d %s", code, out)
	}
	if code, out := startApp(t, p, w.Name); code != 0 {
		t.Fatalf("start witness: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "the witness's restart and end", func() bool { return p.Status(t, w.Name) == 1 })
	if n := len(runTimes(t, filepath.Join(vol, "witness"))); n != 2 {
		t.Fatalf("the witness ran %d times, want 2", n)
	}
	rec, err := status.ReadRecord(p.statusDir(), a.Name)
	if err != nil || rec.State != status.StateExited || rec.RestartCount != 0 || p.Status(t, a.Name) != 137 {
		t.Fatalf("the stopped app after the witness's restart: record %+v (%v), status %d", rec, err, p.Status(t, a.Name))
	}
	if n := len(runTimes(t, filepath.Join(vol, "always"))); n != 1 {
		t.Fatalf("the stopped app ran %d times", n)
	}
}
