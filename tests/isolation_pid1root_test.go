package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pid1Needs is PID 1's own share of its bounding set (podplan's
// PID1Capabilities): the rest of it is what the pod's apps are given.
var pid1Needs = []string{
	"CAP_SYS_ADMIN", "CAP_MKNOD", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP",
	"CAP_SETFCAP", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL",
	"CAP_SYS_RESOURCE", "CAP_BPF",
}

// lookAtPID1 is what a process that may read PID 1's /proc entries tries
// (pid: PID 1's pid as it sees it): the host's files, the host's cgroup
// tree, the stage1's files (which rkt gc runs as host root), the pod's own
// files, PID 1's fds and sets. No app can: PID 1 has no pid in the apps'
// namespace (TestStage1OutOfTheAppsReach); the host's root does it, as an
// app that found a way to PID 1 would.
func lookAtPID1(pid string) []string {
	pp := "/proc/" + pid
	in := func(op, rel string) []string { return []string{"+", "in-pid1-pod", op, rel, pid} }
	args := []string{"ls", pp + "/root/", "+", "ls", pp + "/root/etc", "+", "ls", pp + "/root/sys/fs/cgroup",
		"+", "mkdir", pp + "/root/sys/fs/cgroup/pod1-test-escape", "+", "mkdir", pp + "/root/pod1-test-escape",
		"+", "mkdir", pp + "/root/pod1-shm/pod1-test-escape"}
	for _, c := range [][2]string{
		{"open-write", "stage1/rootfs/stage1-init"}, {"open-write", "stage1/rootfs/gc"}, {"open-write", "stage1/rootfs/pod1-init"},
		{"open-write", "stage1/manifest"}, {"open-write", "pod"}, {"touch", "stage1/rootfs/planted"}, {"mkdir", "stage1/rootfs/opt/planted"},
		// What the host side and PID 1 trust (issue 33 item 2).
		{"touch", "stage1/rootfs/rkt/status/planted"}, {"open-write", "stage1/rootfs/rkt/pod1/apps/a.json"},
		{"open-write", "stage1/rootfs/rkt/pod1/options.json"}, {"touch", "stage1/rootfs/rkt/planted"},
	} {
		args = append(args, in(c[0], c[1])...)
	}
	return append(args, "+", "open-write", pp+"/exe", "+", "readlink", pp+"/cwd", "+", "fdlinks", pid, "+", "cat", pp+"/status",
		"+", "write-all", pp+"/root/sys/fs/cgroup")
}

// lookAtPause is what an app that may read its pid 1's /proc entries
// finds there: pod1-pause, with no capability, no descriptor and a
// read-only root holding the pod's cgroups, read-only, and nothing else:
// no file there opens for writing (a cgroup's cgroup.procs, pids.max,
// cgroup.freeze, the stage1's own among them).
var lookAtPause = probe("ls", "/proc/1/root/", "+", "mkdir", "/proc/1/root/planted", "+", "mkdir", "/proc/1/root/sys/fs/cgroup/planted",
	"+", "write-all", "/proc/1/root/sys/fs/cgroup", "+", "readlink", "/proc/1/exe",
	"+", "open-write", "/proc/1/exe", "+", "fdlinks", "1", "+", "status-of", "1", "+", "sleep", "1h")

// T19, T4, T-ROOT-2: PID 1's /proc/PID/root holds nothing of the host and
// nothing of the stage1 image anyone can write; PID 1 holds no fd on
// anything of the host, and its bounding set is its own needs plus what
// the pod's apps are given (here CAP_SYS_PTRACE; then every capability).
// The app itself, which PID 1 is out of reach of, finds pod1-pause as its
// pid 1, holding nothing but a bounding set, the app's, it cannot use. Before PID 1 had a root of its own, the same
// app listed the host's /etc and created a cgroup in the host's tree.
func TestPID1HasARootOfItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps []string
	}{
		{"ptrace", append(append([]string{}, rktDefaultCaps...), "CAP_SYS_PTRACE")},
		{"allcaps", allCapabilities()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := isoPod(t, []App{{Name: "a", Exec: lookAtPause}},
				Isolators{"a": {isolator("os/linux/capabilities-retain-set", map[string]any{"set": tc.caps})}}, nil)
			realStage1Image(t, p)
			before := stage1Hashes(t, p)
			r := start(t, p, RunOpts{})
			pid1 := strconv.Itoa(podPid(t, p))
			waitFor(t, eventDeadline, "the app's look", func() bool { return strings.Contains(r.Stdout.String(), "status-of 1 CapAmb ") })
			look := exec.Command(bin("probe"), lookAtPID1(pid1)...)
			look.Dir = "/"
			outb, err := look.Output()
			if err != nil {
				t.Fatalf("look at PID 1: %v", err)
			}
			checkPID1Descriptors(t, pid1, string(outb))
			must(t, r.Cmd.Process.Signal(unix.SIGTERM))
			r.Wait(t)
			out, app := string(outb), r.Stdout.String()
			defer func() {
				if t.Failed() {
					t.Logf("host's look:\n%s\napp's look:\n%s\nstderr:\n%s", out, app, r.Stderr)
				}
			}()
			root := "/proc/" + pid1 + "/root"
			// The new root holds the path down to the pod directory, the
			// pod's cgroups, procfs: no /etc, /usr, /home...
			got := ""
			for _, l := range strings.Split(out, "\n") {
				if v, ok := strings.CutPrefix(l, "ls "+root+"/ "); ok {
					got = v
				}
			}
			if !isSubset(strings.Fields(got), []string{"proc", "dev", "sys", "var", "tmp", "run", "work", "root", "srv", "home", "mnt", "opt", "pod1-apps-proc", "pod1-shm"}) || strings.Contains(got, "etc") {
				t.Errorf("PID 1's root holds %q", got)
			}
			for _, w := range []string{
				"ls " + root + "/etc error open " + root + "/etc: no such file or directory",
				"mkdir " + root + "/sys/fs/cgroup/pod1-test-escape EROFS",
				"mkdir " + root + "/pod1-test-escape EROFS",
				// The pod's /dev/shm: the apps' to write, not PID 1's.
				"mkdir " + root + "/pod1-shm/pod1-test-escape EROFS",
				// Running: the kernel says so first; not running: read-only.
				"in-pid1-pod open-write stage1/rootfs/pod1-init ETXTBSY",
				"in-pid1-pod open-write stage1/rootfs/stage1-init EROFS",
				"in-pid1-pod open-write stage1/rootfs/gc EROFS",
				"in-pid1-pod open-write stage1/manifest EROFS",
				"in-pid1-pod open-write pod EROFS",
				"in-pid1-pod touch stage1/rootfs/planted EROFS",
				"in-pid1-pod mkdir stage1/rootfs/opt/planted EROFS",
				"open-write /proc/" + pid1 + "/exe ETXTBSY",
				"readlink /proc/" + pid1 + "/cwd -> " + p.Dir,
				"in-pid1-pod touch stage1/rootfs/rkt/status/planted EROFS",
				"in-pid1-pod open-write stage1/rootfs/rkt/pod1/apps/a.json EROFS",
				"in-pid1-pod open-write stage1/rootfs/rkt/pod1/options.json EROFS",
				"in-pid1-pod touch stage1/rootfs/rkt/planted EROFS",
			} {
				if !strings.Contains(out, w+"\n") {
					t.Errorf("missing %q", w)
				}
			}
			// pod1-pause, as the app sees it.
			for _, w := range []string{
				"ls /proc/1/root/ sys", "mkdir /proc/1/root/planted EROFS", "mkdir /proc/1/root/sys/fs/cgroup/planted EROFS",
				"readlink /proc/1/exe -> /", "open-write /proc/1/exe ETXTBSY",
				"status-of 1 CapEff 0000000000000000", "status-of 1 CapPrm 0000000000000000",
				"status-of 1 CapInh 0000000000000000", "status-of 1 CapAmb 0000000000000000",
				"status-of 1 NoNewPrivs 1",
				// Its bounding set is the app's, as rkt's pid 1's was
				// (rkt's TestCaps): a ceiling it cannot use.
				"status-of 1 CapBnd " + capsAnd(t, capMask(t, tc.caps...), ownBoundingSet(t)),
			} {
				if !strings.Contains(app, w+"\n") {
					t.Errorf("app: missing %q", w)
				}
			}
			if l := r.Line(t, "write-all "); !strings.Contains(l, " ok=0 ") || strings.Contains(l, " of=0") {
				t.Errorf("app: %q: files of the pod's cgroups open for writing, or none seen", l)
			}
			if strings.Contains(app, "fdlinks 1 ") {
				t.Errorf("pod1-pause holds descriptors: %q", r.Lines("fdlinks 1 "))
			}
			// Nothing the mkdirs could have made on the host.
			for _, d := range []string{"/sys/fs/cgroup/pod1-test-escape", "/pod1-test-escape"} {
				if _, err := os.Stat(d); err == nil {
					_ = os.Remove(d)
					t.Errorf("the look created %s on the host", d)
				}
			}
			// Not a cgroup file of the pod opens for writing in PID 1's
			// root: it writes them through copies of its own (issue 33
			// item 2).
			if l := lineWith(out, "write-all "); !strings.Contains(l, " ok=0 ") || strings.Contains(l, " of=0") {
				t.Errorf("%q: files of the pod's cgroups open for writing in PID 1's root, or none seen", l)
			}
			bnd := ""
			for _, l := range strings.Split(out, "\n") {
				if v, ok := strings.CutPrefix(l, "cat CapBnd:"); ok {
					bnd = strings.TrimSpace(v)
				}
			}
			// Within what the stage1 itself was given.
			var own, need uint64
			_, _ = fmt.Sscanf(ownBoundingSet(t), "%x", &own)
			_, _ = fmt.Sscanf(capMask(t, append(append([]string{}, pid1Needs...), tc.caps...)...), "%x", &need)
			if want := fmt.Sprintf("%016x", own&need); bnd != want {
				t.Errorf("PID 1's bounding set %s, want %s", bnd, want)
			}
			if after := stage1Hashes(t, p); !reflect.DeepEqual(before, after) {
				t.Fatalf("stage1 files changed:\nbefore %v\nafter  %v", before, after)
			}
			if _, err := os.Stat(filepath.Join(p.Dir, "stage1/rootfs/planted")); err == nil {
				t.Error("a file was planted in the stage1 image")
			}
		})
	}
}

// checkPID1Descriptors: no descriptor of PID 1's is a directory from which
// ".." leads to the host's root (only detached copies: fdinfo, the log
// directories, the writable copies of rkt/ and of the pod's cgroups), and
// through none of them are the run's options or the pod's cgroup list
// writable (pinned read-only under every copy).
func checkPID1Descriptors(t *testing.T, pid1, look string) {
	t.Helper()
	var host unix.Stat_t
	must(t, unix.Stat("/", &host))
	ents, err := os.ReadDir("/proc/" + pid1 + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	dirs := 0
	for _, e := range ents {
		fd := "/proc/" + pid1 + "/fd/" + e.Name()
		var st unix.Stat_t
		if unix.Stat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		dirs++
		var up unix.Stat_t
		if err := unix.Stat(fd+strings.Repeat("/..", 64), &up); err == nil && up.Dev == host.Dev && up.Ino == host.Ino {
			t.Errorf("PID 1's fd %s leads to the host's root: %s", e.Name(), lineWith(look, "fdlinks "+pid1+" "+e.Name()+" "))
		}
		for _, f := range []string{"pod1/options.json", "pod1/cgroups.json"} {
			w, err := unix.Open(fd+"/"+f, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(w)
				t.Errorf("%s writable through PID 1's fd %s", f, e.Name())
			}
		}
	}
	if dirs == 0 {
		t.Error("no directory descriptor of PID 1's seen")
	}
}

func lineWith(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func isSubset(got, of []string) bool {
	for _, g := range got {
		found := false
		for _, o := range of {
			found = found || g == o
		}
		if !found {
			return false
		}
	}
	return true
}

// podEnter runs the pod's own enter entry point, as pod1 enter does.
func podEnter(t *testing.T, p *Pod, app string, cmd ...string) (string, string, int) {
	t.Helper()
	ep := filepath.Join(p.Dir, "stage1/rootfs/enter")
	if _, err := os.Lstat(ep); err != nil {
		must(t, os.Symlink("stage1-init", ep))
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(30*time.Second, eventDeadline))
	defer cancel()
	c := exec.CommandContext(ctx, ep, append([]string{fmt.Sprintf("--pid=%d", podPid(t, p)), "--appname=" + app, "--"}, cmd...)...)
	c.Dir = p.Dir
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	c.WaitDelay = time.Second
	_ = c.Run()
	if ctx.Err() != nil {
		t.Fatal("enter timed out")
	}
	return o.String(), e.String(), c.ProcessState.ExitCode()
}

// T19, issue 11 item 2: an app with every capability and no seccomp
// filter covers its own /proc with a tmpfs in which every path the stage1
// could execute itself through (/proc/self/exe, /proc/self/fd/N,
// /proc/1/exe) is its own program, which leaves a marker in a host
// directory when run. enter (from the pod's stage1, as pod1 enter runs it,
// and from a copy outside the pod, as rkt enter does) still runs the
// command asked for, in the app, and never the planted program. Before,
// enter executed /proc/self/fd/4 inside the app's tree: the app's file,
// as host root.
func TestEnterNeverRunsWhatTheAppPlanted(t *testing.T) {
	vol := t.TempDir()
	apps := []App{{Name: "a", Exec: probe("plant-proc", "+", "write", "/vol/planted-done", "x", "+", "sleep", "60s"),
		MPoints: []map[string]any{{"name": "v", "path": "/vol"}}}}
	p := isoPod(t, apps, Isolators{"a": {
		isolator("os/linux/capabilities-retain-set", map[string]any{"set": allCapabilities()}),
		isolator("os/linux/seccomp-retain-set", map[string]any{"set": []string{"@appc.io/all"}}),
	}}, []map[string]any{{"name": "v", "kind": "host", "source": vol}})
	before := stage1Hashes(t, p)
	r := start(t, p, RunOpts{})
	waitFor(t, 10*time.Second, "the app planted its /proc", func() bool {
		_, err := os.Stat(filepath.Join(vol, "planted-done"))
		return err == nil
	})
	// planted-done is written only once plant-proc has succeeded.
	for name, enter := range map[string]func(*testing.T, *Pod, string, ...string) (string, string, int){
		"pod's enter": podEnter, "rkt's enter": rktEnter,
	} {
		// The command runs, or enter gives up cleanly: with its /proc
		// covered, the app has no capability sets to read.
		out, errOut, code := enter(t, p, "a", "/bin/probe", "ids", "+", "exit", "7")
		ran := code == 7 && strings.HasPrefix(out, "ids ")
		gaveUp := code == 254 && strings.Contains(errOut, "/proc/self/status: no such file")
		if !ran && !gaveUp {
			t.Errorf("%s: %d %q %q", name, code, out, errOut)
		}
		if b, err := os.ReadFile(filepath.Join(vol, "planted-ran")); err == nil {
			t.Fatalf("%s ran the app's planted program:\n%s", name, b)
		}
	}
	_ = r.Cmd.Process.Signal(os.Interrupt)
	r.Wait(t)
	if after := stage1Hashes(t, p); !reflect.DeepEqual(before, after) {
		t.Fatalf("stage1 files changed:\nbefore %v\nafter  %v", before, after)
	}
}

// Issue 11 item 10, T6/T7: an image symlink that leads a volume's target
// onto the app's /proc, /sys, /dev or its root is refused before anything
// starts, one line naming the mount; an image that turns its target into
// such a link while the pod runs gets its next start refused (254) by the
// app's set-up process, which checks what the kernel resolved. Before,
// the volume was mounted over the app's own /proc.
func TestMountTargetSymlinkOntoPseudoFSRefused(t *testing.T) {
	vol := t.TempDir()
	vols := []map[string]any{{"name": "v", "kind": "host", "source": vol}}
	for link, want := range map[string]string{
		"/proc": "resolves to /proc, on the app's /proc", "/proc/self": "resolves to /proc/self, on the app's /proc",
		"/sys/fs": "resolves to /sys/fs, on the app's /sys", "/dev/shm": "resolves to /dev/shm, on the app's /dev",
		"../../": "resolves to the app's root",
	} {
		apps := []App{{Name: "a", Exec: probe("exit", "0"), MPoints: []map[string]any{{"name": "v", "path": "/data"}},
			Rootfs: func(t *testing.T, root string) { must(t, os.Symlink(link, filepath.Join(root, "data"))) }}}
		p := newPodRaw(t, manifest(apps, vols), apps)
		r := runPod(t, p, RunOpts{})
		line := `stage1: app "a": mounts: target /data ` + want
		if r.Code != 254 || strings.TrimSpace(r.Stderr.String()) != line {
			t.Errorf("data -> %s: exit %d, stderr %q, want %q", link, r.Code, r.Stderr, line)
		}
	}
	// At run time: the app turns /a, which holds its mount point, into a
	// link to /dev/shm and exits; its restart is refused.
	apps := []App{{Name: "a", Exec: probe("swap", "/a", "/dev/shm"),
		MPoints:     []map[string]any{{"name": "v", "path": "/a/data"}},
		Annotations: map[string]string{"pod1/restart-policy": "always", "pod1/start-limit-burst": "2"}}}
	p := newPodRaw(t, manifest(apps, vols), apps)
	r := runPod(t, p, RunOpts{})
	if !strings.Contains(r.Stdout.String(), "swap done") ||
		!strings.Contains(r.Stderr.String(), `app "a": mount bind on /a/data: target /a/data resolves to /dev/shm/data, on the app's /dev`) {
		t.Fatalf("restart through /dev: exit %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if got := p.Status(t, "a"); got != 254 {
		t.Errorf("status %d, want 254", got)
	}
}

// Issue 11 item 10, T3: an image entry point that is a link to
// /proc/self/exe, or a script whose interpreter is, would run the binary
// of the stage1 process doing the exec as the app; it is refused (126)
// whatever the link's spelling, and the stage1's files are unchanged.
func TestExecThroughProcMagicLinksRefused(t *testing.T) {
	apps := []App{
		{Name: "link", Exec: []string{"/bin/app"}, Rootfs: func(t *testing.T, root string) {
			must(t, os.Symlink("../proc/self/exe", filepath.Join(root, "bin/app")))
		}},
		{Name: "script", Exec: []string{"/bin/app"}, Rootfs: func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(root, "bin/app"), []byte("#!/proc/self/exe\n"), 0o755))
		}},
		{Name: "script2", Exec: []string{"/bin/app"}, Rootfs: func(t *testing.T, root string) {
			must(t, os.Symlink("/proc/self/exe", filepath.Join(root, "bin/interp")))
			must(t, os.WriteFile(filepath.Join(root, "bin/app"), []byte("#!/bin/interp -x\n"), 0o755))
		}},
		{Name: "fd", Exec: []string{"/bin/app"}, Rootfs: func(t *testing.T, root string) {
			must(t, os.Symlink("/proc/self/fd/0", filepath.Join(root, "bin/app")))
		}},
	}
	for _, a := range apps {
		p := newPodRaw(t, manifest([]App{a}, nil), []App{a})
		realStage1Image(t, p)
		before := stage1Hashes(t, p)
		r := runPod(t, p, RunOpts{})
		if got := p.Status(t, a.Name); got != 126 || r.Code != 126 {
			t.Errorf("app %s: status %d, pod %d, want 126: %s", a.Name, got, r.Code, r.Stderr)
		}
		// Through a /proc link for a process of the app's /proc; into
		// /proc for the set-up process, which has no pid there.
		if e := r.Stderr.String(); !strings.Contains(e, "through a /proc link: permission denied") && !strings.Contains(e, "resolves into /proc: permission denied") {
			t.Errorf("app %s: %s", a.Name, r.Stderr)
		}
		if after := stage1Hashes(t, p); !reflect.DeepEqual(before, after) {
			t.Fatalf("stage1 files changed:\nbefore %v\nafter  %v", before, after)
		}
	}
}

// Issue 11 item 10: the apps of a pod share its pid namespace (as in rkt),
// so /proc/PID/root of another app's process is there to try. The kernel
// lets through whoever passes its ptrace read check: the same user, with
// effective capabilities covering the other's permitted set, or
// CAP_SYS_PTRACE. This pins what is true, as README and docs/security.md
// say: root apps with rkt's defaults reach each other's roots; a root app
// does not reach an app run as another user, nor one holding a capability
// it lacks; an app of another user reaches no root app.
func TestCrossAppProcRootIsTheKernelsPtraceCheck(t *testing.T) {
	all := "rootb,user,fewer,more"
	apps := []App{
		{Name: "roota", Exec: probe("tag", "roota", "+", "peer-roots", all, "+", "sleep", "1s")},
		{Name: "rootb", Exec: probe("tag", "rootb", "+", "sleep", "3s")},
		{Name: "user", User: "1000", Group: "1000", Exec: probe("tag", "user", "+", "peer-roots", "rootb,fewer", "+", "sleep", "3s")},
		{Name: "fewer", Exec: probe("tag", "fewer", "+", "peer-roots", "rootb,more", "+", "sleep", "3s")},
		{Name: "more", Exec: probe("tag", "more", "+", "sleep", "3s")},
	}
	p := isoPod(t, apps, Isolators{
		"fewer": {isolator("os/linux/capabilities-remove-set", map[string]any{"set": []string{"CAP_KILL"}})},
		"more":  {isolator("os/linux/capabilities-retain-set", map[string]any{"set": append(append([]string{}, rktDefaultCaps...), "CAP_NET_ADMIN")})},
	}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	// From roota (root, defaults): rootb and fewer yes; user, more no.
	// From user (uid 1000): rootb and fewer no (another user).
	// From fewer (root, defaults without CAP_KILL): rootb and more no.
	counts := map[string]int{}
	for _, l := range r.Lines("peer-root ") {
		counts[strings.TrimPrefix(l, "peer-root ")]++
	}
	wantCounts := map[string]int{"rootb ok": 1, "user EACCES": 1, "fewer ok": 1, "more EACCES": 2, "rootb EACCES": 2, "fewer EACCES": 1}
	if !reflect.DeepEqual(counts, wantCounts) {
		t.Fatalf("peer roots %v, want %v\n%s", counts, wantCounts, r.Stderr)
	}
}

// realStage1Image lays the pod's stage1 out as make image does: the
// binary itself in the stage1 rootfs (not a link to the build's), the
// entry points relative links to it, a manifest beside the rootfs.
func realStage1Image(t *testing.T, p *Pod) {
	t.Helper()
	s1 := filepath.Join(p.Dir, "stage1/rootfs")
	b, err := os.ReadFile(bin("stage1-init"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(s1, "stage1-init"), b, 0o755))
	for _, name := range []string{"pod1-init", "pod1-pause"} {
		b, err = os.ReadFile(bin(name))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(s1, name), b, 0o755))
	}
	for _, ep := range []string{"stop", "gc", "enter", "app-add", "app-start", "app-stop", "app-rm", "attach"} {
		_ = os.Remove(filepath.Join(s1, ep))
		must(t, os.Symlink("stage1-init", filepath.Join(s1, ep)))
	}
	w, err := os.ReadFile(bin("pod1-waiter"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(s1, "pod1-waiter"), w, 0o755))
	must(t, os.Remove(filepath.Join(s1, "run")))
	must(t, os.Symlink("pod1-waiter", filepath.Join(s1, "run")))
	m, err := os.ReadFile(filepath.Join(repoRoot, "rootfs/manifest.json"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(p.Dir, "stage1/manifest"), m, 0o644))
}

// The same attack through the real rkt (the build's, as the other rkt
// tests use): rkt run with this stage1, the app plants its /proc, rkt
// enter runs the command asked for and never the app's code.
func TestRktEnterNeverRunsWhatTheAppPlanted(t *testing.T) {
	rkt := rktBin(t)
	d := probeACIDir(t)
	m, _ := json.Marshal(map[string]any{
		"acKind": "ImageManifest", "acVersion": "0.8.11", "name": "pod1.dev/probe",
		"labels": []map[string]string{{"name": "os", "value": "linux"}, {"name": "arch", "value": "amd64"}},
		"app": map[string]any{
			"exec": probe("plant-proc", "+", "write", "/vol/planted-done", "x", "+", "sleep", "60s"), "user": "0", "group": "0",
			"mountPoints": []map[string]any{{"name": "vol", "path": "/vol"}},
			"isolators": []map[string]any{
				isolator("os/linux/capabilities-retain-set", map[string]any{"set": allCapabilities()}),
				isolator("os/linux/seccomp-retain-set", map[string]any{"set": []string{"@appc.io/all"}}),
			},
		},
	})
	must(t, os.WriteFile(filepath.Join(d, "manifest"), m, 0o644))
	aci := filepath.Join(t.TempDir(), "probe.aci")
	if out, err := exec.Command("tar", "-C", d, "-cf", aci, "manifest", "rootfs").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	data, vol := dataDir(t), t.TempDir()
	uuidFile := filepath.Join(t.TempDir(), "uuid")
	ctx, cancel := context.WithTimeout(context.Background(), max(90*time.Second, eventDeadline))
	defer cancel()
	run := exec.CommandContext(ctx, rkt, "--insecure-options=image", "--dir="+data, "run", "--net=none",
		"--stage1-path="+rktStage1(t), "--uuid-file-save="+uuidFile,
		"--volume=vol,kind=host,source="+vol, aci)
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	run.WaitDelay = time.Second
	must(t, run.Start())
	done := make(chan struct{})
	go func() { _ = run.Wait(); close(done) }()
	defer func() {
		_ = exec.Command(rkt, "--dir="+data, "stop", "--force", "--uuid-file="+uuidFile).Run()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = run.Process.Kill()
			<-done
		}
		_ = exec.Command(rkt, "--dir="+data, "gc", "--grace-period=0s").Run()
	}()
	waitFor(t, 30*time.Second, "the app planted its /proc", func() bool {
		_, err := os.Stat(filepath.Join(vol, "planted-done"))
		return err == nil
	})
	uuid, err := os.ReadFile(uuidFile)
	must(t, err)
	var out, errOut bytes.Buffer
	enter := exec.CommandContext(ctx, rkt, "--dir="+data, "enter", "--app=probe", strings.TrimSpace(string(uuid)), "/bin/probe", "ids", "+", "exit", "7")
	enter.Stdout, enter.Stderr = &out, &errOut
	_ = enter.Run()
	code := enter.ProcessState.ExitCode()
	ran := code == 7 && strings.HasPrefix(out.String(), "ids ")
	gaveUp := code != 0 && strings.Contains(errOut.String(), "/proc/self/status: no such file")
	if !ran && !gaveUp {
		t.Errorf("rkt enter: %d %q %q\nrun: %s", code, out.String(), errOut.String(), runOut.String())
	}
	t.Logf("rkt enter: exit %d, command ran: %v", code, ran)
	if b, err := os.ReadFile(filepath.Join(vol, "planted-ran")); err == nil {
		t.Fatalf("rkt enter ran the app's planted program:\n%s", b)
	}
}

// rktStage1 is the stage1 image the rkt test runs: the build's, or
// $POD1_TEST_STAGE1_ACI (to show the test fails against an older build).
func rktStage1(t *testing.T) string {
	if p := os.Getenv("POD1_TEST_STAGE1_ACI"); p != "" {
		return p
	}
	return stage1ACI(t)
}
