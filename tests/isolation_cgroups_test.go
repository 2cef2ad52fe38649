package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// deviceChecks makes nodes off the allow-list (host block device 7:0, the
// misc device 10:232, /dev/mem's 1:1, and the terminals, which may be
// opened but not made: the old ptmx 5:2 and a pts 136:0) and one on it,
// and opens for reading
// and writing nodes planted in the image (7:0, null) and the app's own
// /dev, and /dev/kmsg's 1:11 for writing (reading it needs CAP_SYSLOG).
var deviceChecks = []string{
	"mknod", "b", "7", "0", "/tmp/blk", "+", "mknod", "c", "10", "232", "/tmp/misc", "+",
	"mknod", "c", "1", "1", "/tmp/mem", "+", "mknod", "c", "1", "3", "/tmp/null", "+",
	"mknod", "c", "5", "2", "/tmp/ptmx", "+", "mknod", "c", "136", "0", "/tmp/pts0", "+",
	"open-rw", "/nodes/loop0", "+", "open-write", "/nodes/kmsg", "+", "open-rw", "/nodes/null", "+",
	"open-rw", "/dev/null", "+", "open-rw", "/dev/urandom", "+", "open-rw", "/dev/ptmx",
}

var deviceWant = []string{
	"mknod /tmp/blk EPERM", "mknod /tmp/misc EPERM", "mknod /tmp/mem EPERM", "mknod /tmp/null ok",
	"mknod /tmp/ptmx EPERM", "mknod /tmp/pts0 EPERM",
	"open-rw /nodes/loop0 EPERM", "open-write /nodes/kmsg EPERM", "open-rw /nodes/null ok",
	"open-rw /dev/null ok", "open-rw /dev/urandom ok", "open-rw /dev/ptmx ok",
}

// cgDeadline bounds this file's waits for events (a pod started, forks
// refused): generous, as the emulated VM of make vm-test is slow; a wait
// ends as soon as its event happens.
var cgDeadline = eventDeadline

// runningApp waits for app's record to say it runs, and returns its pid.
func runningApp(t *testing.T, p *Pod, app string) int {
	t.Helper()
	waitFor(t, cgDeadline, "app "+app+" running", func() bool {
		r, err := status.ReadRecord(p.statusDir(), app)
		return err == nil && r.State == status.StateRunning && r.Pid > 0
	})
	return appPid(t, p, app)
}

func plantNodes(t *testing.T, root string) {
	must(t, os.Mkdir(filepath.Join(root, "nodes"), 0o755))
	for name, d := range map[string][3]uint32{"loop0": {unix.S_IFBLK, 7, 0}, "kmsg": {unix.S_IFCHR, 1, 11}, "null": {unix.S_IFCHR, 1, 3}} {
		must(t, unix.Mknod(filepath.Join(root, "nodes", name), d[0]|0o666, int(unix.Mkdev(d[1], d[2]))))
	}
}

func deviceLines(out string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "mknod ") || strings.HasPrefix(l, "open-rw ") || strings.HasPrefix(l, "open-write ") {
			ls = append(ls, l)
		}
	}
	return ls
}

// An app with rkt's default capabilities (CAP_MKNOD among them) can make
// and open only the devices of its allow-list: no host block device, no
// char device off the list, whether it makes the node or finds it in its
// image; a process entered into it is held the same way. The same probe on
// the host opens the planted nodes (negative control: the refusals are
// the pod's).
func TestDeviceAllowList(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe(append(append([]string{}, deviceChecks...), "+", "sleep", "1h")...),
		Rootfs: func(t *testing.T, root string) { plantNodes(t, root) }}}, nil)
	root := filepath.Join(p.Dir, "stage1/rootfs/opt/stage2/a/rootfs")
	ctx, cancel := context.WithTimeout(context.Background(), cgDeadline)
	defer cancel()
	// Without a loop driver 7:0 gives ENXIO, after the device check.
	host, err := exec.CommandContext(ctx, bin("probe"), "open-rw", filepath.Join(root, "nodes/loop0"), "+", "open-write", filepath.Join(root, "nodes/kmsg")).CombinedOutput()
	if err != nil || strings.Count(string(host), "\n") != 2 || strings.Contains(string(host), "EPERM") {
		t.Fatalf("on the host, the planted nodes are refused: %v %s", err, host)
	}
	if _, err := os.Lstat(filepath.Join(p.Dir, "stage1/rootfs/enter")); err != nil {
		must(t, os.Symlink(bin("stage1-init"), filepath.Join(p.Dir, "stage1/rootfs/enter")))
	}
	r := start(t, p, RunOpts{Timeout: 2 * cgDeadline})
	defer func() {
		if t.Failed() {
			t.Logf("stdout: %s\nstderr: %s", r.Stdout, r.Stderr)
		}
	}()
	runningApp(t, p, "a")
	waitFor(t, cgDeadline, "the app's report", func() bool { return strings.Contains(r.Stdout.String(), "open-rw /dev/ptmx") })
	if got := deviceLines(r.Stdout.String()); strings.Join(got, "\n") != strings.Join(deviceWant, "\n") {
		t.Errorf("app:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(deviceWant, "\n"))
	}
	// The entered process gets its own /tmp names: the app made some.
	enterChecks := strings.ReplaceAll(strings.Join(deviceChecks, "\x00"), "/tmp/", "/tmp/e-")
	out, errOut, code := rktEnter(t, p, "a", probe(strings.Split(enterChecks, "\x00")...)...)
	if code != 0 {
		t.Fatalf("enter: %d %s; stdout %q", code, errOut, out)
	}
	want := strings.ReplaceAll(strings.Join(deviceWant, "\n"), "/tmp/", "/tmp/e-")
	if got := strings.Join(deviceLines(out), "\n"); got != want {
		t.Errorf("entered:\n%s\nwant:\n%s", got, want)
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
}

// podCgroupFile finds file in the cgroup of the pod's apps (where the pod's
// pids.max is) in the hierarchy that has the pids controller (v1), else in
// the cgroup2 one.
func podCgroupFile(t *testing.T, p *Pod, file string) string {
	t.Helper()
	g := podCgroup(t, p)
	if d := g.V1["pids"]; d != "" {
		return filepath.Join(d, "apps", file)
	}
	return filepath.Join(g.V2, "apps", file)
}

// Two fork-bombing apps, each under the per-app default (three quarters of
// the pod's limit, podplan.AppPidsMax), are held together by the pod's
// pids.max set by annotation, and PID 1, outside the apps' cgroup, is not
// starved: the pod stops cleanly. (Two bombs together may still fill the
// pod: the per-app default leaves siblings room against one,
// TestForkBombLeavesSiblingsRoom.)
func TestPodPidsMaxHoldsForkBombs(t *testing.T) {
	grace := map[string]string{"pod1/stop-grace-period": "1s"}
	apps := []App{
		{Name: "bomb1", Exec: probe("forkbomb"), Annotations: grace},
		{Name: "bomb2", Exec: probe("forkbomb"), Annotations: grace},
		{Name: "steady", Exec: probe("sleep", "1h"), Annotations: grace},
	}
	p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{
		"pod1/exit-policy": "main-app", "pod1/main-app": "steady", "pod1/pod-pids-max": "100"}), apps)
	r := start(t, p, RunOpts{Args: []string{"--net=none"}, Timeout: 2 * cgDeadline})
	defer func() {
		if t.Failed() {
			t.Logf("stdout: %s\nstderr: %s", r.Stdout, r.Stderr)
		}
	}()
	runningApp(t, p, "steady")
	if got := readTrim(t, podCgroupFile(t, p, "pids.max")); got != "100" {
		t.Fatalf("pod pids.max = %q", got)
	}
	// A bomb is held when its fork fails (it says so and waits), or when
	// its own Go runtime, refused a thread by the same limit, dies of it
	// (then it has a status): both are the pod's limit at work.
	waitFor(t, cgDeadline, "both bombs to be held", func() bool {
		held := strings.Count(r.Stdout.String(), "forkbomb stopped after")
		for _, a := range []string{"bomb1", "bomb2"} {
			if p.Status(t, a) != -1 {
				held++
			}
		}
		return held >= 2
	})
	if n, _ := strconv.Atoi(readTrim(t, podCgroupFile(t, p, "pids.current"))); n > 100 {
		t.Errorf("pod pids.current = %d with the limit at 100", n)
	}
	// Each bomb is far below its own limit: the pod's held them.
	total := 0
	for _, a := range []string{"bomb1", "bomb2"} {
		if p.Status(t, a) != -1 {
			continue // died of the limit, see above
		}
		pid := runningApp(t, p, a)
		if got := readTrim(t, cgroupFile(t, pid, "pids", "pids.max")); got != "75" {
			t.Errorf("%s: pids.max %s, want the per-app default", a, got)
		}
		n, _ := strconv.Atoi(readTrim(t, cgroupFile(t, pid, "pids", "pids.current")))
		total += n
	}
	if total > 100 {
		t.Errorf("the bombs hold %d tasks with the pod's limit at 100", total)
	}
	// PID 1 is outside the apps' limit: it still starts threads and
	// processes, and stops the pod with every status written.
	if procState(podPid(t, p)) == "" {
		t.Fatal("PID 1 died")
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	for _, a := range []string{"bomb1", "bomb2", "steady"} {
		if p.Status(t, a) == -1 {
			t.Errorf("%s has no status", a)
		}
	}
}

// One app fork-bombing up to its own default limit leaves its sibling
// enough of the pod's tasks to fork and exec: the per-app default is three
// quarters of the pod's limit. It was 8192 whatever the pod's, above the
// whole pod's limit on a host with a small pid_max, so one app could take
// every task of the pod.
func TestForkBombLeavesSiblingsRoom(t *testing.T) {
	grace := map[string]string{"pod1/stop-grace-period": "1s"}
	apps := []App{
		{Name: "bomb", Exec: probe("forkbomb"), Annotations: grace},
		{Name: "sib", Exec: probe("wait-file", "/tmp/go", "+", "spawn", "2", "1s", "+", "exit", "0"), Annotations: grace},
	}
	p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{
		"pod1/exit-policy": "main-app", "pod1/main-app": "sib", "pod1/pod-pids-max": "200"}), apps)
	r := start(t, p, RunOpts{Args: []string{"--net=none"}, Timeout: 2 * cgDeadline})
	defer func() {
		if t.Failed() {
			t.Logf("stdout: %s\nstderr: %s", r.Stdout, r.Stderr)
		}
	}()
	runningApp(t, p, "sib")
	waitFor(t, cgDeadline, "the bomb to be held", func() bool {
		return strings.Contains(r.Stdout.String(), "forkbomb stopped after") || p.Status(t, "bomb") != -1
	})
	if p.Status(t, "bomb") == -1 {
		if got := readTrim(t, cgroupFile(t, runningApp(t, p, "bomb"), "pids", "pids.max")); got != "150" {
			t.Errorf("bomb: pids.max %s, want 150 (three quarters of the pod's 200)", got)
		}
	}
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.AppRootfs("sib"), "tmp/go"), nil, 0o644))
	if code := r.Wait(t); code != 0 {
		t.Errorf("pod exit %d, want the sibling's 0", code)
	}
	if code := p.Status(t, "sib"); code != 0 {
		t.Errorf("the sibling could not fork and exec beside the bomb: status %d", code)
	}
}

// Without the annotation the pod gets systemd's DefaultTasksMax: 15% of
// what the host allows.
func TestPodPidsMaxDefault(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{Timeout: 2 * cgDeadline})
	defer func() {
		if t.Failed() {
			t.Logf("stderr: %s", r.Stderr)
		}
	}()
	runningApp(t, p, "a")
	read := func(f string) int64 {
		b, err := os.ReadFile(f)
		must(t, err)
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		must(t, err)
		return n
	}
	want := min(read("/proc/sys/kernel/pid_max")-1, read("/proc/sys/kernel/threads-max")) * 15 / 100
	if got := readTrim(t, podCgroupFile(t, p, "pids.max")); got != strconv.FormatInt(want, 10) {
		t.Errorf("pod pids.max = %s, want %d", got, want)
	}
	// The app's default is three quarters of it, at most 8192, also for
	// the first app, whose cgroup PID 1 makes before run has set the
	// pod's limit.
	perApp := min(8192, want-want/4)
	if got := readTrim(t, cgroupFile(t, runningApp(t, p, "a"), "pids", "pids.max")); got != strconv.FormatInt(perApp, 10) {
		t.Errorf("app pids.max = %s, want %d", got, perApp)
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
}

// gcEntry runs the stage1's gc entry point as rkt gc does (cwd the pod
// directory, the UUID as argument).
func gcEntry(t *testing.T, p *Pod) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cgDeadline)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(p.Dir, "stage1/rootfs/gc"), p.UUID)
	c.Dir = p.Dir
	out, _ := c.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatal("gc timed out")
	}
	return string(out), c.ProcessState.ExitCode()
}

// gc runs as host root on the pod's cgroups.json, which the pod may have
// written: a file naming anything but this pod's own cgroups in a real
// hierarchy is refused with one line, and nothing it names is touched.
func TestGCActsOnlyOnThePodsCgroups(t *testing.T) {
	p := newPod(t, []App{okApp("a")}, nil)
	must(t, os.MkdirAll(filepath.Join(p.Dir, layout.Pod1Dir), 0o700))
	plain := filepath.Join(t.TempDir(), "x")
	must(t, os.MkdirAll(filepath.Join(plain, "sub"), 0o755))
	named := filepath.Join(t.TempDir(), cgroups.PodName(p.UUID))
	must(t, os.MkdirAll(filepath.Join(named, "sub"), 0o755))
	legacy := filepath.Join(t.TempDir(), cgroups.LegacyPodName(p.UUID))
	must(t, os.MkdirAll(filepath.Join(legacy, "sub"), 0o755))
	// Another cgroup, with a process in it.
	victim := "/sys/fs/cgroup/pids/pod1-test-victim-" + strconv.Itoa(os.Getpid())
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err != nil {
		victim = "/sys/fs/cgroup/pod1-test-victim-" + strconv.Itoa(os.Getpid())
	}
	must(t, os.Mkdir(victim, 0o755))
	defer func() { _ = unix.Rmdir(victim) }()
	ctx, cancel := context.WithTimeout(context.Background(), cgDeadline)
	defer cancel()
	sleeper := exec.CommandContext(ctx, "sleep", "60")
	must(t, sleeper.Start())
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	must(t, os.WriteFile(filepath.Join(victim, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0))
	hier := "pids"
	if !strings.HasPrefix(victim, "/sys/fs/cgroup/pids/") {
		hier = ""
	}
	group := func(dir string) string {
		if hier == "" {
			return fmt.Sprintf(`{"v2":%q}`, dir)
		}
		return fmt.Sprintf(`{"v1":{%q:%q}}`, hier, dir)
	}
	for name, planted := range map[string]string{
		"plain directory":          fmt.Sprintf(`{"v2":%q}`, plain),
		"plain directory as v1":    fmt.Sprintf(`{"v1":{"pids":%q}}`, plain),
		"pod's name, not a cgroup": fmt.Sprintf(`{"v2":%q,"v1":{"pids":%q}}`, named, named),
		"old name, not a cgroup":   fmt.Sprintf(`{"v2":%q,"v1":{"pids":%q}}`, legacy, legacy),
		"another cgroup":           group(victim),
		"through ..":               group(filepath.Join(filepath.Dir(victim), cgroups.PodName(p.UUID), "..", filepath.Base(victim))),
		"wrong hierarchy":          fmt.Sprintf(`{"v1":{"memory":%q}}`, victim),
	} {
		must(t, os.WriteFile(filepath.Join(p.Dir, layout.CgroupsFile), []byte(planted), 0o600))
		out, code := gcEntry(t, p)
		if code != status.CodeStage1Failure || strings.Count(out, "\n") != 1 || !strings.Contains(out, "refused") {
			t.Errorf("%s: gc exit %d, output %q; want 254 and one line", name, code, out)
		}
	}
	for _, d := range []string{filepath.Join(plain, "sub"), filepath.Join(named, "sub"), filepath.Join(legacy, "sub"), victim} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if procState(sleeper.Process.Pid) == "" || strings.HasPrefix(procState(sleeper.Process.Pid), "Z") {
		t.Error("the process in another cgroup was killed")
	}
}

// A process left in the pod's cgroups after the stage1 was SIGKILLed (one
// the kernel had not killed with the pod's pid namespace: here a host
// process put there) is killed by gc, which returns only once it is gone
// and the cgroups are removed.
func TestGCKillsLeftoversBeforeReturning(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{Timeout: 2 * cgDeadline})
	runningApp(t, p, "a")
	init := podPid(t, p)
	g := podCgroup(t, p)
	dirs := []string{g.V2}
	for _, d := range g.V1 {
		dirs = append(dirs, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cgDeadline)
	defer cancel()
	left := exec.CommandContext(ctx, "sleep", "60")
	must(t, left.Start())
	defer func() { _ = left.Process.Kill(); _ = left.Wait() }()
	for _, d := range dirs {
		if d == "" {
			continue
		}
		must(t, os.Mkdir(filepath.Join(d, "leftover"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "leftover", "cgroup.procs"), []byte(strconv.Itoa(left.Process.Pid)), 0))
	}
	must(t, r.Cmd.Process.Signal(unix.SIGKILL))
	r.Wait(t)
	waitFor(t, cgDeadline, "PID 1 gone", func() bool { return procState(init) == "" })
	if procState(left.Process.Pid) == "" {
		t.Fatal("the leftover died with the stage1: the test would prove nothing")
	}
	out, code := gcEntry(t, p)
	if code != 0 {
		t.Fatalf("gc: %d %s", code, out)
	}
	// Dead when gc returned: a zombie of ours, waiting to be reaped.
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(left.Process.Pid, &ws, unix.WNOHANG, nil); pid != left.Process.Pid || err != nil || ws.Signal() != unix.SIGKILL {
		t.Fatalf("leftover not dead when gc returned: wait4 %d %v %v", pid, err, ws)
	}
	_ = left.Process.Release()
	if d := cgroupDirs(p); len(d) != 0 {
		t.Errorf("cgroups left: %v", d)
	}
}

// An app sees its own cgroups at /sys/fs/cgroup, read-only, and nothing
// else of any hierarchy: its limits are readable where runtimes look for
// them (the JVM, Go's GOMAXPROCS), none can be raised, no cgroup can be
// made. With /sys/fs masked (the default) the mask leaves cgroup/ alone;
// with --disable-paths the views are on the sysfs's own cgroup/.
func TestAppSeesItsOwnCgroupsReadOnly(t *testing.T) {
	// Where the host keeps the memory limit decides where the app reads it.
	limitDir, limitFile := "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		limitDir, limitFile = "/sys/fs/cgroup", "memory.max"
	}
	limit := limitDir + "/" + limitFile
	cmd := probe("ls", "/sys/fs", "+", "ls", "/sys/fs/cgroup", "+", "ls", limitDir, "+", "cat", limit,
		"+", "mkdir", "/sys/fs/cgroup/pod1-test", "+", "mkdir", limitDir+"/pod1-test", "+", "open-write", limit,
		"+", "open-write", limitDir+"/cgroup.procs")
	for _, tc := range []struct {
		name string
		args []string
	}{{"masked /sys/fs", nil}, {"disable-paths", []string{"--net=none", "--disable-paths"}}} {
		t.Run(tc.name, func(t *testing.T) {
			p := isoPod(t, []App{{Name: "a", Exec: cmd}, {Name: "b", Exec: probe("exit", "0")}},
				Isolators{"a": {isolator("resource/memory", map[string]any{"limit": "64Mi"})}}, nil)
			r := runPod(t, p, RunOpts{Args: tc.args})
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			out := r.Stdout.String()
			defer func() {
				if t.Failed() {
					t.Logf("stdout:\n%s", out)
				}
			}()
			if tc.args == nil && !strings.Contains(out, "ls /sys/fs cgroup\n") {
				t.Errorf("/sys/fs shows more than cgroup/, or not it: %q", r.Lines("ls /sys/fs "))
			}
			if !strings.Contains(out, "cat 67108864\n") {
				t.Errorf("the app does not read its memory limit at %s: %q", limit, r.Lines("cat "))
			}
			// Its own cgroup, not the pod's or the host's: no app's
			// cgroup, no pod's, below what it sees.
			for _, l := range r.Lines("ls /sys/fs/cgroup") {
				if strings.Contains(l, "app-") || strings.Contains(l, "pod1-") || strings.Contains(l, "machine-") || strings.Contains(l, " apps") {
					t.Errorf("the app sees other cgroups: %q", l)
				}
			}
			for _, w := range []string{
				"mkdir /sys/fs/cgroup/pod1-test EROFS", "mkdir " + limitDir + "/pod1-test EROFS",
				"open-write " + limit + " EROFS", "open-write " + limitDir + "/cgroup.procs EROFS",
			} {
				if !strings.Contains(out, w+"\n") {
					t.Errorf("missing %q", w)
				}
			}
		})
	}
}

// An app's emptied cgroup is removed once its status is written while the
// pod goes on; at the pod's end it stays, empty, for gc with the pod's
// (PID 1 no longer removes it in every hierarchy before it may exit).
func TestAppCgroupRemovedUnlessThePodIsEnding(t *testing.T) {
	p := newPod(t, []App{
		{Name: "short", Exec: probe("exit", "0")},
		{Name: "long", Exec: probe("sleep", "1h")},
	}, nil)
	r := start(t, p, RunOpts{})
	waitFor(t, eventDeadline, "short's status", func() bool { return p.Status(t, "short") == 0 })
	dirs := podCgroup(t, p).Dirs()
	if len(dirs) == 0 {
		t.Fatal("the pod has no cgroup")
	}
	app := func(dir, name string) string { return filepath.Join(dir, cgroups.AppsName, "app-"+name) }
	for _, d := range dirs {
		if _, err := os.Stat(app(d, "long")); err != nil {
			t.Fatalf("long's cgroup while it runs: %v", err)
		}
		waitFor(t, eventDeadline, "short's cgroup removed in "+d, func() bool {
			_, err := os.Stat(app(d, "short"))
			return errors.Is(err, os.ErrNotExist)
		})
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	if got := p.Status(t, "long"); got != 143 {
		t.Fatalf("long's status %d, want 143", got)
	}
	for _, d := range dirs {
		procs, err := os.ReadFile(filepath.Join(app(d, "long"), "cgroup.procs"))
		if err != nil || len(procs) != 0 {
			t.Errorf("long's cgroup in %s after the pod's end: %q, %v; want there and empty", d, procs, err)
		}
	}
}

// PID 1 is in the pod's cgroup for itself (stage1) in every hierarchy the
// pod has before any app runs: run sends PID 1 its configuration before
// it has moved PID 1 there (the move waits for the kernel, and PID 1 sets
// itself up meanwhile), and PID 1 starts nothing before run says it has.
// The app reads PID 1's cgroups first thing.
func TestPID1InItsCgroupBeforeTheFirstApp(t *testing.T) {
	p := isoPod(t, []App{{Name: "a", Exec: probe("cat", "/proc/1/cgroup", "+", "cat", "/proc/self/cgroup")}},
		Isolators{"a": {isolator("resource/memory", map[string]any{"limit": "64Mi"})}}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	// PID 1's lines, then the app's, one per hierarchy, in the same order.
	lines := r.Lines("cat ")
	if len(lines) == 0 || len(lines)%2 != 0 {
		t.Fatalf("cgroups of PID 1 and the app: %q", lines)
	}
	pid1, app := lines[:len(lines)/2], lines[len(lines)/2:]
	if unifiedHost(t) {
		// In the apps' cgroup namespace, rooted at the apps' cgroup
		// (TestAppsCgroupNamespace).
		if len(app) != 1 || app[0] != "cat 0::/app-a" || pid1[0] != "cat 0::/../stage1" {
			t.Fatalf("cgroups of PID 1 and the app, as the app sees them: %q, %q", pid1, app)
		}
		return
	}
	checked := 0
	for i, a := range app {
		// hierarchy-id:controllers:path
		af, pf := strings.SplitN(a, ":", 3), strings.SplitN(pid1[i], ":", 3)
		if len(af) != 3 || len(pf) != 3 || af[0] != pf[0] || af[1] != pf[1] {
			t.Fatalf("cgroups of PID 1 and the app do not match: %q, %q", pid1, app)
		}
		pod, ok := strings.CutSuffix(af[2], "/apps/app-a")
		if !ok {
			continue // a hierarchy the pod has no cgroup in
		}
		checked++
		if pf[2] != pod+"/stage1" {
			t.Errorf("PID 1 in %s:%s when the app ran, not in the pod's %s/stage1", pf[1], pf[2], pod)
		}
	}
	if checked == 0 {
		t.Fatalf("the app is in no cgroup of the pod's: %q", app)
	}
}

// unifiedHost reports whether the host's only cgroup hierarchy is v2.
func unifiedHost(t *testing.T) bool {
	t.Helper()
	var st unix.Statfs_t
	must(t, unix.Statfs("/sys/fs/cgroup", &st))
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

// On a host whose only hierarchy is cgroup v2 the apps live in a cgroup
// namespace of the pod's, rooted at the apps' cgroup: an app sees its
// own as "/app-<name>", and its pid 1 (pod1-pause) holds that cgroup,
// read-only, at /sys/fs/cgroup, where the app's own path leads to its
// limits. rkt's apps read them there, through /proc/1/root, as in rkt's
// stage1 (rkt's TestAppIsolatorMemory on such a host), and nothing of
// the host's other cgroups, or of the stage1's, is shown. An entered
// command joins the namespace too. On other layouts the apps are in the
// host's cgroup namespace, as before (make vm-test LAYOUT=v2 runs this).
func TestAppsCgroupNamespace(t *testing.T) {
	if !unifiedHost(t) {
		t.Skip("the host has cgroup v1 hierarchies: no cgroup namespace for the apps (make vm-test LAYOUT=v2 runs this)")
	}
	look := probe("cat", "/proc/self/cgroup", "+", "fstype", "/proc/1/root/sys/fs/cgroup", "+",
		"cat", "/proc/1/root/sys/fs/cgroup/app-a/memory.max", "+", "ls", "/proc/1/root/sys/fs/cgroup", "+",
		"mkdir", "/proc/1/root/sys/fs/cgroup/planted", "+", "cat", "/sys/fs/cgroup/memory.max", "+", "fstype", "/sys/fs/cgroup")
	p := isoPod(t, []App{{Name: "a", Exec: look}, {Name: "b", Exec: probe("sleep", "20s")}},
		Isolators{"a": {isolator("os/linux/capabilities-retain-set", map[string]any{"set": []string{"CAP_SYS_PTRACE"}}),
			isolator("resource/memory", map[string]any{"limit": "64Mi"})}}, nil)
	r := runPod(t, p, RunOpts{})
	out := r.Stdout.String()
	defer func() {
		if t.Failed() {
			t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, out, r.Stderr)
		}
	}()
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	if got := r.Lines("cat "); len(got) != 3 || got[0] != "cat 0::/app-a" || got[1] != "cat 67108864" || got[2] != "cat 67108864" {
		// Its own cgroup, its limit through its pid 1's root, and
		// through its own /sys/fs/cgroup, as before.
		t.Errorf("the app's cgroup and limits: %q", got)
	}
	for _, w := range []string{
		"fstype /proc/1/root/sys/fs/cgroup cgroup2",
		// The pod's apps, and nothing else: not the stage1's cgroup.
		"ls /proc/1/root/sys/fs/cgroup ",
		"mkdir /proc/1/root/sys/fs/cgroup/planted EROFS",
		"fstype /sys/fs/cgroup cgroup2",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q", w)
		}
	}
	ls := r.Lines("ls /proc/1/root/sys/fs/cgroup ")
	if len(ls) != 1 || !strings.Contains(" "+ls[0]+" ", " app-a ") || !strings.Contains(" "+ls[0]+" ", " app-b ") ||
		strings.Contains(" "+ls[0]+" ", " stage1 ") || strings.Contains(" "+ls[0]+" ", " apps ") {
		t.Errorf("the apps' pid 1's /sys/fs/cgroup: %q; want the apps' cgroup (app-a, app-b), nothing above it", ls)
	}
}
