package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/layout"
)

// pod1cli runs the pod1 CLI with a timeout and returns its exit code and
// output.
func pod1cli(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin("pod1"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("pod1 %v: %v", args, err)
	}
	return 0, string(out)
}

// cliSandbox starts `pod1 app sandbox` and returns the data dir and UUID;
// the pod is stopped and its overlays unmounted at the end.
func cliSandbox(t *testing.T, flags ...string) (string, string) {
	t.Helper()
	data := dataDir(t)
	uuidFile := filepath.Join(t.TempDir(), "uuid")
	ctx, cancel := context.WithTimeout(context.Background(), 2*eventDeadline)
	cmd := exec.CommandContext(ctx, bin("pod1"), append([]string{"app", "sandbox", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none", "--uuid-file-save=" + uuidFile}, flags...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var uuid string
	waitFor(t, 20*time.Second, "sandbox ready", func() bool {
		b, err := os.ReadFile(uuidFile)
		if err != nil {
			return false
		}
		uuid = strings.TrimSpace(string(b))
		_, err = os.Readlink(filepath.Join(data, "pods/run", uuid, layout.SupervisorStatus))
		return err == nil
	})
	ownPod(uuid)
	// Registered after dataDir's cleanup, so it runs first: stop the pod,
	// then the overlays can be unmounted.
	t.Cleanup(func() {
		pod1cli(t, nil, "--dir="+data, "stop", uuid)
		select {
		case <-done:
		case <-time.After(eventDeadline):
			_ = cmd.Process.Kill()
			<-done
		}
		cancel()
		if t.Failed() {
			t.Logf("sandbox stderr: %s", stderr.String())
		}
	})
	return data, uuid
}

func appState(t *testing.T, data, uuid, app string) (string, string) {
	t.Helper()
	code, out := pod1cli(t, nil, "--dir="+data, "app", "status", uuid, "--app="+app)
	if code != 0 {
		return "", out
	}
	var state, exit string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "state="); ok {
			state = v
		}
		if v, ok := strings.CutPrefix(l, "exit_code="); ok {
			exit = v
		}
	}
	return state, exit
}

// assertAppGone checks that nothing of an app is left in a pod.
func assertAppGone(t *testing.T, data, uuid, app string) {
	t.Helper()
	dir := filepath.Join(data, "pods/run", uuid)
	for _, f := range []string{layout.AppDir(app), layout.AppInfoDir(app), "appops/" + app,
		layout.StatusDir + "/" + app, layout.StatusDir + "/" + app + ".json",
		layout.StatusDir + "/" + app + "-created", layout.StatusDir + "/" + app + "-started",
		layout.AppSpec(app)} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			t.Errorf("app %s: %s left", app, f)
		}
	}
	if m, _ := launch.MountsUnder(filepath.Join(dir, layout.Stage2Dir, app)); len(m) != 0 {
		t.Errorf("app %s: mounts left: %v", app, m)
	}
	pod, _ := cgroups.Named(cgroups.PodName(uuid))
	for _, d := range pod {
		if _, err := os.Lstat(filepath.Join(d, cgroups.AppsName, "app-"+app)); err == nil {
			t.Errorf("app %s: cgroup left in %s", app, d)
		}
	}
	p, err := pods.Read(data, uuid)
	must(t, err)
	for _, a := range p.Apps {
		if a.Name == app {
			t.Errorf("app %s still in the pod manifest", app)
		}
	}
}

// The rktlet-like sequence through pod1's own app commands.
func TestPod1AppCommands(t *testing.T) {
	data, uuid := cliSandbox(t)
	img := probeACIDir(t)
	d := "--dir=" + data
	for _, a := range [][]string{
		{"--name=web", "--exec=/bin/probe", "--", "sleep", "1h"},
		{"--name=db", "--exec=/bin/probe", "--", "sleep", "1h"},
		{"--name=crashy", "--annotation=pod1/restart-policy=on-failure", "--annotation=pod1/restart-backoff=10ms",
			"--annotation=pod1/start-limit-burst=3", "--annotation=pod1/start-limit-interval=1h", "--exec=/bin/probe", "--", "exit", "3"},
	} {
		if code, out := pod1cli(t, nil, append([]string{d, "app", "add", uuid, img}, a...)...); code != 0 {
			t.Fatalf("add %v: %d %s", a, code, out)
		}
	}
	if s, _ := appState(t, data, uuid, "web"); s != "created" {
		t.Fatalf("web after add: %q", s)
	}
	for _, n := range []string{"web", "db", "crashy"} {
		if code, out := pod1cli(t, nil, d, "app", "start", uuid, "--app="+n); code != 0 {
			t.Fatalf("start %s: %d %s", n, code, out)
		}
	}
	if s, _ := appState(t, data, uuid, "web"); s != "running" {
		t.Fatalf("web after start: %q", s)
	}
	waitFor(t, 10*time.Second, "crashy failed for good", func() bool {
		s, e := appState(t, data, uuid, "crashy")
		return s == "exited" && e == "3"
	})
	if code, out := pod1cli(t, nil, d, "app", "stop", uuid, "--app=db"); code != 0 {
		t.Fatalf("stop db: %d %s", code, out)
	}
	if s, e := appState(t, data, uuid, "db"); s != "exited" || e != "143" {
		t.Fatalf("db after stop: %s %s", s, e)
	}
	if code, out := pod1cli(t, nil, d, "app", "stop", uuid, "--app=db"); code != 0 {
		t.Fatalf("stop of a stopped app: exit %d, want 0: %s", code, out)
	}
	if s, e := appState(t, data, uuid, "db"); s != "exited" || e != "143" {
		t.Fatalf("db after a second stop: %s %s", s, e)
	}
	if code, out := pod1cli(t, nil, d, "app", "rm", uuid, "--app=web"); code != 0 {
		t.Fatalf("rm web: %d %s", code, out)
	}
	assertAppGone(t, data, uuid, "web")
	if code, out := pod1cli(t, nil, d, "app", "add", uuid, img, "--name=web", "--exec=/bin/probe", "--", "exit", "0"); code != 0 {
		t.Fatalf("re-add web: %d %s", code, out)
	}
	if s, e := appState(t, data, uuid, "web"); s != "created" || e != "" {
		t.Fatalf("re-added web: %s %s", s, e)
	}
	if code, out := pod1cli(t, nil, d, "app", "start", uuid, "--app=web"); code != 0 {
		t.Fatalf("start web again: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "web's second life", func() bool {
		s, e := appState(t, data, uuid, "web")
		return s == "exited" && e == "0"
	})
	code, out := pod1cli(t, nil, d, "app", "list", uuid)
	if code != 0 || !strings.Contains(out, "crashy\texited\t3\t2") || !strings.Contains(out, "db\texited\t143\t0") {
		t.Fatalf("list: %d %q", code, out)
	}
}

// An add or rm killed at any step is finished or undone by the next app
// operation on the pod, or by pod1 gc.
func TestPod1AppOperationsKilledAtEachStep(t *testing.T) {
	data, uuid := cliSandbox(t)
	img := probeACIDir(t)
	d := "--dir=" + data
	steps := []string{"add:journalled", "add:rendered", "add:manifest", "add:created", "add:added"}
	for i, step := range steps {
		code, out := pod1cli(t, []string{"POD1_TEST_APPOP_KILL_AT=" + step}, d, "app", "add", uuid, img, "--name=victim", "--exec=/bin/probe", "--", "sleep", "1h")
		if code != -1 && code != 137 {
			t.Fatalf("%s: add was not killed: %d %s", step, code, out)
		}
		// Recovered by the next operation (even ps-like ones take the
		// lock) or by gc.
		if i%2 == 0 {
			if code, out := pod1cli(t, nil, d, "app", "add", uuid, img, "--name=bystander"+strings.Repeat("x", i), "--exec=/bin/probe", "--", "exit", "0"); code != 0 {
				t.Fatalf("%s: next add: %d %s", step, code, out)
			}
		} else if code, out := pod1cli(t, nil, d, "gc", "--mark-only"); code != 0 {
			t.Fatalf("%s: gc: %d %s", step, code, out)
		}
		assertAppGone(t, data, uuid, "victim")
	}
	// rm killed after PID 1 forgot the app but before its files went.
	if code, out := pod1cli(t, nil, d, "app", "add", uuid, img, "--name=victim", "--exec=/bin/probe", "--", "sleep", "1h"); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "app", "start", uuid, "--app=victim"); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	for _, step := range []string{"rm:journalled", "rm:forgotten"} {
		code, _ := pod1cli(t, []string{"POD1_TEST_APPOP_KILL_AT=" + step}, d, "app", "rm", uuid, "--app=victim")
		if code != -1 && code != 137 {
			t.Fatalf("%s: rm was not killed: %d", step, code)
		}
		if step == "rm:journalled" {
			// Not finished yet: the next operation completes it.
			continue
		}
	}
	if code, out := pod1cli(t, nil, d, "gc", "--mark-only"); code != 0 {
		t.Fatalf("gc: %d %s", code, out)
	}
	assertAppGone(t, data, uuid, "victim")
}

// The global flags (--dir, --debug, --insecure-options) are taken after
// the command too, as rkt's persistent flags are: before the app command,
// before or after the UUID of app add, among an app's flags, and among
// run's images.
func TestPod1GlobalFlagsAfterTheCommand(t *testing.T) {
	data, uuid := cliSandbox(t)
	img := probeACIDir(t)
	d := "--dir=" + data
	for _, args := range [][]string{
		{"app", "add", d, uuid, img, "--name=a", "--exec=/bin/probe", "--", "sleep", "1h"},
		{"app", "add", uuid, "--dir", data, img, "--name=b", "--exec=/bin/probe", "--", "sleep", "1h"},
		{"app", "add", uuid, img, "--name=c", d, "--debug=false", "--exec=/bin/probe", "--", "sleep", "1h"},
		{"app", d, "add", "--insecure-options=image", uuid, img, "--name=e", "--exec=/bin/probe"},
	} {
		if code, out := pod1cli(t, nil, args...); code != 0 {
			t.Fatalf("pod1 %v: %d %s", args, code, out)
		}
	}
	code, out := pod1cli(t, nil, "app", d, "list", uuid)
	for _, n := range []string{"a", "b", "c", "e"} {
		if code != 0 || !strings.Contains(out, n+"\tcreated") {
			t.Errorf("app %s not listed: %d %q", n, code, out)
		}
	}
	// An app flag before the UUID is still refused, in one line.
	if code, out := pod1cli(t, nil, "app", "add", d, "--name=x", uuid, img); code != 254 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "--name=x") {
		t.Errorf("an app flag before the UUID: %d %q", code, out)
	}
	// run: a global flag after the image, before the app's arguments.
	other := dataDir(t)
	code, out = pod1cli(t, nil, "run", "--stage1-path="+stage1ACI(t), "--net=none", img, "--dir="+other, "--exec=/bin/probe", "--", "exit", "0")
	if code != 0 {
		t.Fatalf("run with --dir after the image: %d %s", code, out)
	}
	if ents, _ := os.ReadDir(filepath.Join(other, "pods/run")); len(ents) != 1 {
		t.Errorf("the pod is not in the --dir given after the image: %v", ents)
	}
}
