package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// appPid waits for the app's record to say it runs and returns its host pid.
func appPid(t *testing.T, p *Pod, app string) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, "app "+app+" running", func() bool {
		r, err := status.ReadRecord(p.statusDir(), app)
		if err != nil || r.State != status.StateRunning {
			return false
		}
		pid = r.Pid
		return pid > 0
	})
	return pid
}

// rktEnter runs the enter entrypoint the way rkt v1.30.0's stage0 does:
// from a copy outside the pod (rkt's tree store), cwd the pod directory,
// argv --pid=N --appname=NAME -- CMD, rkt's environment, and extra fds
// open (rkt holds the pod's lock through one).
func rktEnter(t *testing.T, p *Pod, app string, cmd ...string) (string, string, int) {
	t.Helper()
	tree := filepath.Join(t.TempDir(), "cas/tree/deps-sha512-x/rootfs")
	must(t, os.MkdirAll(tree, 0o755))
	b, err := os.ReadFile(bin("stage1-init"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(tree, "enter"), b, 0o755))
	lock, err := os.Open(p.Dir)
	must(t, err)
	defer lock.Close()
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(tree, "enter"),
		append([]string{fmt.Sprintf("--pid=%d", podPid(t, p)), "--appname=" + app, "--"}, cmd...)...)
	c.Dir = p.Dir
	c.ExtraFiles = []*os.File{lock, os.Stdin}
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	c.WaitDelay = time.Second
	_ = c.Run()
	if ctx.Err() != nil {
		t.Fatal("enter timed out")
	}
	return o.String(), e.String(), c.ProcessState.ExitCode()
}

func linesWith(out, prefix string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			ls = append(ls, strings.TrimPrefix(l, prefix))
		}
	}
	return ls
}

func procLines(t *testing.T, pid int, file string, keep func(string) bool) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	must(t, err)
	var out []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n\x00"), map[bool]string{true: "\x00", false: "\n"}[file == "environ"]) {
		if keep(l) {
			out = append(out, l)
		}
	}
	return out
}

// enter runs the command in the chosen app: its mount namespace and root,
// the pod's other namespaces, the app's user, groups, working directory,
// environment, capabilities and cgroups, and fds 0, 1 and 2 only, even
// when started by rkt with more open.
func TestHostsideEnterIsTheApp(t *testing.T) {
	p := newPod(t, []App{
		{Name: "a", Exec: probe("sleep", "1h"), User: "1000", Group: "1000", Groups: []int{50}, WD: "/tmp", Env: map[string]string{"FOO": "bar"}},
		{Name: "b", Exec: probe("sleep", "1h")},
		{Name: "c", Exec: probe("exit", "0")},
	}, nil)
	if _, err := os.Lstat(filepath.Join(p.Dir, layout.Stage1RootFS, "enter")); err != nil {
		must(t, os.Symlink(bin("stage1-init"), filepath.Join(p.Dir, layout.Stage1RootFS, "enter")))
	}
	start(t, p, RunOpts{})
	pid1, a, b := podPid(t, p), appPid(t, p, "a"), appPid(t, p, "b")

	out, errOut, code := rktEnter(t, p, "a", probe("ids", "+", "cwd", "+", "fds", "+", "env", "+", "ns", "+", "status", "+", "cat", "/proc/self/cgroup")...)
	if code != 0 {
		t.Fatalf("enter: %d %s", code, errOut)
	}
	// Root, as rkt's enter ran commands (issue 34 item 8), holding what
	// a root process of the app would: its bounding set.
	if got := linesWith(out, "ids "); len(got) != 1 || got[0] != "uid=0 gid=0 groups=[]" {
		t.Errorf("credentials: %q", got)
	}
	if got := linesWith(out, "cwd "); len(got) != 1 || got[0] != "/tmp" {
		t.Errorf("cwd: %q", got)
	}
	if got := linesWith(out, "fds "); len(got) != 1 || got[0] != "0 1 2" {
		t.Errorf("fds: %q", got)
	}
	// The app's environment, but for TERM, which is the caller's (vt100
	// without one), as rkt's enter gives it.
	term := os.Getenv("TERM")
	if term == "" {
		term = "vt100"
	}
	env := procLines(t, a, "environ", func(l string) bool { return !strings.HasPrefix(l, "TERM=") })
	env = append(env, "TERM="+term)
	sort.Strings(env)
	var gotEnv []string
	for _, l := range linesWith(out, "env ") {
		gotEnv = append(gotEnv, strings.Trim(l, `"`))
	}
	if strings.Join(gotEnv, "\n") != strings.Join(env, "\n") {
		t.Errorf("environment %q, the app's %q", gotEnv, env)
	}
	for _, l := range linesWith(out, "ns ") {
		f := strings.Fields(l)
		// The app's own mount namespace and the apps' pid namespace;
		// the pod's others.
		owner := pid1
		if f[0] == "mnt" || f[0] == "pid" {
			owner = a
		}
		if want, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", owner, f[0])); f[1] != want {
			t.Errorf("namespace %s: %s, want %s (pid %d)", f[0], f[1], want, owner)
		}
	}
	caps := procLines(t, a, "status", func(l string) bool {
		return strings.HasPrefix(l, "Cap") || strings.HasPrefix(l, "NoNewPrivs") || strings.HasPrefix(l, "Seccomp:")
	})
	bnd := ""
	for i, l := range caps {
		caps[i] = strings.Join(strings.Fields(l), " ")
		if v, ok := strings.CutPrefix(caps[i], "CapBnd: "); ok {
			bnd = v
		}
	}
	for i, l := range caps {
		if strings.HasPrefix(l, "CapPrm: ") || strings.HasPrefix(l, "CapEff: ") {
			caps[i] = l[:len("CapPrm: ")] + bnd
		}
	}
	var gotCaps []string
	for _, l := range linesWith(out, "status ") {
		if !strings.HasPrefix(l, "Sig") {
			gotCaps = append(gotCaps, l)
		}
	}
	if strings.Join(gotCaps, "\n") != strings.Join(caps, "\n") {
		t.Errorf("isolation %q, the app's %q", gotCaps, caps)
	}
	cg := procLines(t, a, "cgroup", func(string) bool { return true })
	if unifiedHost(t) {
		// The app's as it sees it: in the apps' cgroup namespace,
		// rooted at the apps' cgroup (TestAppsCgroupNamespace).
		for i, l := range cg {
			if j := strings.Index(l, "/"+cgroups.AppsName+"/"); j >= 0 && strings.HasPrefix(l, "0::") {
				cg[i] = "0::" + l[j+len(cgroups.AppsName)+1:]
			}
		}
	}
	if got := linesWith(out, "cat "); strings.Join(got, "\n") != strings.Join(cg, "\n") {
		t.Errorf("cgroups %q, the app's %q", got, cg)
	}

	// Another app: its own root and user.
	out, _, code = rktEnter(t, p, "b", "/bin/probe", "ids", "+", "ns")
	if wantMnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", b)); code != 0 || !strings.Contains(out, "ids uid=0 gid=0") || !strings.Contains(out, "ns mnt "+wantMnt) {
		t.Errorf("enter b: %d %q", code, out)
	}
	// Exit codes are the command's; one that cannot run gets a shell's.
	for _, c := range []struct {
		cmd  []string
		want int
	}{
		{probe("exit", "7"), 7}, {probe("kill-self", "9"), 137}, {[]string{"probe", "exit", "3"}, 3},
		{[]string{"/nonexistent"}, 127}, {[]string{"/bin/bash"}, 127}, {nil, 127},
	} {
		if _, errOut, code := rktEnter(t, p, "a", c.cmd...); code != c.want {
			t.Errorf("enter %q: %d, want %d (%s)", c.cmd, code, c.want, errOut)
		}
	}
	if _, errOut, _ := rktEnter(t, p, "a"); !strings.Contains(errOut, `has no /bin/bash, running /bin/sh`) {
		t.Errorf("default command: %q", errOut)
	}
	waitFor(t, 10*time.Second, "app c exited", func() bool { return p.Status(t, "c") == 0 })
	if _, errOut, code := rktEnter(t, p, "c", "/bin/probe"); code != 254 || !strings.Contains(errOut, "not running") {
		t.Errorf("enter an exited app: %d %q", code, errOut)
	}
	if _, errOut, code := rktEnter(t, p, "../a", "/bin/probe"); code != 254 || strings.Count(errOut, "\n") != 1 {
		t.Errorf("bad app name: %d %q", code, errOut)
	}
}

// pod1 enter finds the pod, the app and PID 1, and runs the default shell
// of an image that has one.
func TestHostsidePod1Enter(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	// The image's /bin/sh is the probe: run with no arguments, it exits 0.
	b, err := os.ReadFile(bin("probe"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(img, "rootfs/bin/sh"), b, 0o755))
	p := runBG(t, data, img, "--name=one", "--user=0", "--exec=/bin/probe", "--", "sleep", "1h",
		"---", img, "--name=two", "--exec=/bin/probe", "--", "sleep", "1h")
	p.waitPid(t)
	appPid(t, &Pod{Dir: p.Dir, UUID: p.UUID}, "two")
	if _, errOut, code := pod1(t, data, "enter", p.UUID, "/bin/probe"); code != 254 || !strings.Contains(errOut, "several apps (one, two)") {
		t.Errorf("enter without --app: %d %q", code, errOut)
	}
	if _, errOut, code := pod1(t, data, "enter", "--app=three", p.UUID); code != 254 || !strings.Contains(errOut, `no app "three"`) {
		t.Errorf("enter --app=three: %d %q", code, errOut)
	}
	out, errOut, code := pod1(t, data, "enter", "--app=two", p.UUID[:12], "/bin/probe", "fds", "+", "exit", "5")
	if code != 5 || out != "fds 0 1 2\n" {
		t.Errorf("enter --app=two: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := pod1(t, data, "enter", "--app=one", p.UUID); code != 0 || !strings.Contains(errOut, "running /bin/sh") {
		t.Errorf("enter with the default command: %d %q", code, errOut)
	}
	if out, errOut, code := pod1(t, data, "stop", "--force", p.UUID); code != 0 || out != `"`+p.UUID+`"`+"\n" {
		t.Fatalf("stop --force: %d %q %q", code, out, errOut)
	}
	p.wait(t)
	if out, _, _ := pod1(t, data, "status", p.UUID); !strings.HasSuffix(out, "app-one=137\napp-two=137\n") {
		t.Errorf("forced stop: %q", out)
	}
	if out, _, code := pod1(t, data, "stop", p.UUID); code != 0 || out != fmt.Sprintf("pod %q is already stopped\n", p.UUID) {
		t.Errorf("stop a stopped pod: %d %q", code, out)
	}
	if _, errOut, code := pod1(t, data, "enter", "--app=one", p.UUID); code != 254 || !strings.Contains(errOut, "not running") {
		t.Errorf("enter a stopped pod: %d %q", code, errOut)
	}
	prepared := fakePod(t, data, "prepared", map[string]int{"a": -1}, false)
	if _, errOut, code := pod1(t, data, "stop", prepared); code != 254 || !strings.Contains(errOut, "is not running (prepared)") {
		t.Errorf("stop a prepared pod: %d %q", code, errOut)
	}
}
