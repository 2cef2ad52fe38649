// Package tests holds the integration tests: they start real pods, as root,
// exactly as rkt's stage0 starts a stage1 (a pod directory, a pod manifest,
// an flock'd RKT_LOCK_FD, rkt's argv), and check what the host and the apps
// see. `make test` builds the binaries they use first.
package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/layout"
)

var repoRoot = func() string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}()

func bin(name string) string { return filepath.Join(repoRoot, "bin", name) }

// eventDeadline bounds every wait of the tests for an event (a pod
// started, an app's status written, a command finished). A wait ends as
// soon as its event happens: the deadline only turns a hang into a
// failure, so it is generous, and says nothing about how fast the event
// should be. POD1_TEST_EVENT_DEADLINE sets it where even that is not
// enough: make vm-test under QEMU's emulator on a loaded machine.
var eventDeadline = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("POD1_TEST_EVENT_DEADLINE")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Minute
}()

func TestMain(m *testing.M) {
	if os.Getuid() != 0 {
		fmt.Fprintln(os.Stderr, "tests: the integration tests start real pods and need root (sudo make test)")
		os.Exit(1)
	}
	for _, b := range []string{"stage1-init", "pod1-init", "pod1-waiter", "pod1-pause", "probe", "pod1"} {
		if _, err := os.Stat(bin(b)); err != nil {
			fmt.Fprintf(os.Stderr, "tests: %s missing: run make first (%v)\n", bin(b), err)
			os.Exit(1)
		}
	}
	os.Exit(runCheckingCgroups(m))
}

// App is one app of a test pod.
type App struct {
	Name    string
	Exec    []string
	User    string
	Group   string
	WD      string
	Env     map[string]string
	Groups  []int
	Mounts  []map[string]any
	MPoints []map[string]any
	// Handlers are the app's eventHandlers.
	Handlers []map[string]any
	// Annotations are the app's annotations in the pod manifest.
	Annotations map[string]string
	// Rootfs, if set, customises the app's rootfs after the probe is in.
	Rootfs func(t *testing.T, root string)
}

// Pod is a prepared pod directory.
type Pod struct {
	Dir  string
	UUID string
}

func (p *Pod) statusDir() string { return filepath.Join(p.Dir, layout.StatusDir) }

// Status returns the app's recorded exit code, or -1 when no file exists.
func (p *Pod) Status(t *testing.T, app string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.statusDir(), app))
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	s, ok := strings.CutSuffix(string(b), "\n")
	n, err := strconv.Atoi(s)
	if !ok || err != nil {
		t.Fatalf("status of %s is malformed: %q", app, b)
	}
	return n
}

func newUUID(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/uuid")
	if err != nil {
		t.Fatal(err)
	}
	u := strings.TrimSpace(string(b))
	// Every pod the harness lays out is named with it: its cgroups
	// are this run's (runCheckingCgroups).
	ownPod(u)
	return u
}

func annotationList(m map[string]string) []map[string]string {
	out := []map[string]string{}
	for k, v := range m {
		out = append(out, map[string]string{"name": k, "value": v})
	}
	return out
}

const consoleFormatAnn = "pod1/console-format"

// manifest renders the pod manifest for apps.
func manifest(apps []App, volumes []map[string]any) []byte {
	return manifestAnn(apps, volumes, nil)
}

// manifestAnn renders the pod manifest with pod annotations. The pods the
// harness lays out print the apps' bytes to the console as they wrote them
// (pod1/console-format=raw), which its tests of output read; a test of the
// default console format gives the annotation as "" (none).
func manifestAnn(apps []App, volumes []map[string]any, podAnns map[string]string) []byte {
	anns := map[string]string{consoleFormatAnn: "raw"}
	for k, v := range podAnns {
		anns[k] = v
	}
	if anns[consoleFormatAnn] == "" {
		delete(anns, consoleFormatAnn)
	}
	podAnns = anns
	var as []map[string]any
	for _, a := range apps {
		env := []map[string]string{}
		for k, v := range a.Env {
			env = append(env, map[string]string{"name": k, "value": v})
		}
		user, group := a.User, a.Group
		if user == "" {
			user = "0"
		}
		if group == "" {
			group = "0"
		}
		app := map[string]any{
			"exec": a.Exec, "user": user, "group": group,
			"environment": env, "workingDirectory": a.WD,
		}
		if a.Groups != nil {
			app["supplementaryGIDs"] = a.Groups
		}
		if a.MPoints != nil {
			app["mountPoints"] = a.MPoints
		}
		if a.Handlers != nil {
			app["eventHandlers"] = a.Handlers
		}
		ra := map[string]any{
			"name":  a.Name,
			"image": map[string]any{"name": "pod1.dev/probe", "id": "sha512-" + strings.Repeat("0", 64)},
			"app":   app,
		}
		if a.Mounts != nil {
			ra["mounts"] = a.Mounts
		}
		if a.Annotations != nil {
			ra["annotations"] = annotationList(a.Annotations)
		}
		as = append(as, ra)
	}
	if volumes == nil {
		volumes = []map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{
		"acVersion": "1.30.0", "acKind": "PodManifest", "apps": as,
		"volumes": volumes, "isolators": nil,
		"annotations": append(annotationList(podAnns), map[string]string{"name": "coreos.com/rkt/stage1/mutable", "value": "false"}),
		"ports":       []any{},
	})
	return b
}

func imageManifest(name string) []byte {
	b, _ := json.Marshal(map[string]any{
		"acKind": "ImageManifest", "acVersion": "0.8.11", "name": "pod1.dev/" + name,
		"labels": []map[string]string{{"name": "os", "value": "linux"}, {"name": "arch", "value": "amd64"}},
		"app":    map[string]any{"exec": []string{"/bin/probe"}, "user": "0", "group": "0"},
	})
	return b
}

// newPod lays out a pod directory as stage0 does (contract §5): the pod
// manifest, a stage1 rootfs whose run entry point is our binary, and one
// rootfs per app holding the probe.
func newPod(t *testing.T, apps []App, volumes []map[string]any) *Pod {
	t.Helper()
	return newPodRaw(t, manifest(apps, volumes), apps)
}

func newPodRaw(t *testing.T, podManifest []byte, apps []App) *Pod {
	t.Helper()
	p := &Pod{Dir: filepath.Join(t.TempDir(), "pod"), UUID: newUUID(t)}
	// Runs after the stage1 is stopped (cleanups run last-in first-out):
	// a killed stage1 can leave the bind mount of a mutable pod.
	t.Cleanup(func() {
		if err := launch.UnmountAll(p.Dir); err != nil {
			t.Errorf("unmount %s: %v", p.Dir, err)
		}
	})
	s1 := filepath.Join(p.Dir, layout.Stage1RootFS)
	for _, d := range []string{layout.StatusDirIn, layout.EnvDirIn, layout.Stage2DirIn} {
		must(t, os.MkdirAll(filepath.Join(s1, d), 0o755))
	}
	for _, ep := range []string{"stop", "gc", "enter", "app-add", "app-start", "app-stop", "app-rm", "attach"} {
		must(t, os.Symlink(bin("stage1-init"), filepath.Join(s1, ep)))
	}
	// The waiter is the run entry point, as in the image.
	must(t, os.Symlink(bin("pod1-waiter"), filepath.Join(s1, "run")))
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), podManifest, 0o640))
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodCreated), nil, 0o644))
	for _, a := range apps {
		root := filepath.Join(p.Dir, layout.AppRootfs(a.Name))
		for _, d := range []string{"bin", "etc", "tmp"} {
			must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
		}
		linkOrCopy(t, bin("probe"), filepath.Join(root, "bin/probe"))
		must(t, os.WriteFile(filepath.Join(filepath.Dir(root), "manifest"), imageManifest(a.Name), 0o644))
		must(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nstaff:x:50:\nuser:x:1000:\n"), 0o644))
		if a.Rootfs != nil {
			a.Rootfs(t, root)
		}
	}
	return p
}

// linkOrCopy hard-links a built binary into a pod tree, or copies it when
// the tree is on another file system than the checkout (TMPDIR on a tmpfs,
// as on most distributions, or a VM's scratch disk).
func linkOrCopy(t *testing.T, src, dst string) {
	t.Helper()
	err := os.Link(src, dst)
	if !errors.Is(err, unix.EXDEV) {
		must(t, err)
		return
	}
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.WriteFile(dst, b, 0o755))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Run is a started stage1.
type Run struct {
	Cmd    *exec.Cmd
	Stdout *bytes.Buffer
	Stderr *bytes.Buffer
	cancel context.CancelFunc
	done   chan struct{}
	Code   int
}

// RunOpts shape a stage1 start.
type RunOpts struct {
	Args      []string   // flags before the UUID; default --net=none
	Env       []string   // extra environment
	ExtraFds  []*os.File // passed after the lock fd, inheritable
	NoLock    bool       // do not set RKT_LOCK_FD
	NoFlock   bool       // pass the pod dir fd without locking it
	LockFile  *os.File   // pass this as fd 3 instead of the pod dir
	LockFdEnv string     // RKT_LOCK_FD value override
	Timeout   time.Duration
	Wrapper   []string  // a command the run entry point is started through
	Stdin     io.Reader // the stage1's stdin; default /dev/null
	Stdout    *os.File  // the stage1's stdout; default Run.Stdout
	Stderr    *os.File  // the stage1's stderr; default Run.Stderr
	// Sys replaces the stage1's process attributes (default: a process
	// group of its own), say a session on a terminal.
	Sys *syscall.SysProcAttr
}

// start execs the pod's run entry point like stage0: cwd = pod dir, the
// pod directory flock'd exclusively on an inherited fd named by
// RKT_LOCK_FD.
func start(t *testing.T, p *Pod, o RunOpts) *Run {
	t.Helper()
	if o.Args == nil {
		o.Args = []string{"--net=none"}
	}
	lock := o.LockFile
	if lock == nil {
		var err error
		lock, err = os.Open(p.Dir)
		must(t, err)
		if !o.NoFlock {
			must(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
		}
	}
	// A pod lives until the test stops it, or the test's cleanup kills it:
	// no lifetime of a fixed length, which a slow machine would outlive.
	ctx, cancel := context.WithCancel(context.Background())
	if o.Timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), o.Timeout)
	}
	argv := append(append(append([]string{}, o.Wrapper...), filepath.Join(p.Dir, layout.Stage1RootFS, "run")), append(o.Args, p.UUID)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), o.Env...)
	if !o.NoLock {
		v := "3"
		if o.LockFdEnv != "" {
			v = o.LockFdEnv
		}
		cmd.Env = append(cmd.Env, "RKT_LOCK_FD="+v)
	}
	cmd.ExtraFiles = append([]*os.File{lock}, o.ExtraFds...)
	r := &Run{Cmd: cmd, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, cancel: cancel, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.Stdout, r.Stderr
	if o.Stdout != nil {
		cmd.Stdout = o.Stdout
	}
	if o.Stderr != nil {
		cmd.Stderr = o.Stderr
	}
	cmd.Stdin = o.Stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if o.Sys != nil {
		cmd.SysProcAttr = o.Sys
	}
	cmd.WaitDelay = time.Second
	must(t, cmd.Start())
	// Like stage0, which execs the stage1 and so keeps no copy: only the
	// stage1's inherited fd holds the lock from here on.
	lock.Close()
	go func() {
		_ = cmd.Wait()
		r.Code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Code = 128 + int(ws.Signal())
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		r.cancel()
		<-r.done
		// Every pod leaves its cgroups (emptied, or, when the test
		// killed the stage1, as the kill left them) and its journal's
		// link in the host's for gc, as rkt's stage1 does: the gc
		// entry point removes them.
		_, jerr := os.Lstat(filepath.Join(layout.HostJournalDir, layout.MachineID(p.UUID)))
		if len(cgroupDirs(p)) > 0 || jerr == nil {
			gc := exec.Command(filepath.Join(p.Dir, layout.Stage1RootFS, "gc"), p.UUID)
			gc.Dir = p.Dir
			if out, err := gc.CombinedOutput(); err != nil {
				t.Errorf("gc entry point: %v %s", err, out)
			}
		}
	})
	return r
}

// Wait waits for the stage1 to exit and returns its exit code; a stage1
// still running after eventDeadline fails the test (its cleanup kills it).
func (r *Run) Wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(eventDeadline):
		t.Fatalf("the stage1 is still running after %v\nstdout:\n%s\nstderr:\n%s", eventDeadline, r.Stdout, r.Stderr)
	}
	if r.Cmd.ProcessState == nil {
		t.Fatal("stage1 did not run")
	}
	return r.Code
}

// runPod runs a pod to its end.
func runPod(t *testing.T, p *Pod, o RunOpts) *Run {
	t.Helper()
	r := start(t, p, o)
	r.Wait(t)
	return r
}

// Lines returns the stdout lines starting with prefix.
func (r *Run) Lines(prefix string) []string {
	var out []string
	for _, l := range strings.Split(r.Stdout.String(), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// Line returns the one stdout line starting with prefix.
func (r *Run) Line(t *testing.T, prefix string) string {
	t.Helper()
	ls := r.Lines(prefix)
	if len(ls) != 1 {
		t.Fatalf("want one %q line, got %q\nstdout:\n%s\nstderr:\n%s", prefix, ls, r.Stdout, r.Stderr)
	}
	return ls[0]
}

// locked reports whether someone holds the pod's exclusive lock, tested
// the way rkt does: a shared, non-blocking flock on a new open of the dir.
func locked(t *testing.T, dir string) bool {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
	if err == nil {
		return false
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatal(err)
	}
	return true
}

// podPid reads the pid file the stage1 wrote, waiting for it.
func podPid(t *testing.T, p *Pod) int {
	t.Helper()
	deadline := time.Now().Add(eventDeadline)
	for {
		b, err := os.ReadFile(filepath.Join(p.Dir, layout.Pid))
		if err == nil {
			n, err := strconv.Atoi(strings.TrimSpace(string(b)))
			must(t, err)
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("pid file never appeared")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// pidNS returns the pid namespace of a process.
// holdNS is pidNS, for a namespace the test checks later: it keeps the
// namespace open until the test ends. A namespace's inode number is free
// for the next namespace once the last reference is gone, so a later
// check by number alone could find another pod's processes (seen: a
// sweep's check found the PID 1 of the pod running beside it, whose
// parent was that pod's waiter).
func holdNS(t *testing.T, pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return ""
	}
	t.Cleanup(func() { f.Close() })
	l, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	return l
}

func pidNS(pid int) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return l
}

// procState returns the state letter of a process ("" if gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 {
		return f[0]
	}
	return ""
}

// nsPids lists the host pids of the processes in pid namespace ns (a
// pod's: PID 1's) or in one nested in it (the apps'), zombies included.
func nsPids(ns string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l := pidNS(pid); l != "" && (l == ns || parentNSOf(pid) == ns) {
			out = append(out, pid)
		}
	}
	return out
}

// parentNSOf names the pid namespace pid's is nested in, as pidNS names
// one ("" if it cannot be read).
func parentNSOf(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	fd, err := unix.IoctlRetInt(int(f.Fd()), nsGetParent)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return ""
	}
	return fmt.Sprintf("pid:[%d]", st.Ino)
}

// nsGetParent is linux/nsfs.h's NS_GET_PARENT.
const nsGetParent = 0xb702

// nsMembers lists the live (non-zombie) processes in pid namespace ns. A
// dead PID 1 whose parent was killed stays a zombie until the host's init
// reaps it, which it does lazily; it runs nothing.
func nsMembers(ns string) []int {
	var out []int
	for _, pid := range nsPids(ns) {
		if st := procState(pid); st != "" && st != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// zombiesIn counts zombie processes in pid namespace ns.
func zombiesIn(ns string) int {
	n := 0
	for _, pid := range nsPids(ns) {
		if procState(pid) == "Z" {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds; it gives up after d or
// eventDeadline, whichever is longer.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = max(d, eventDeadline)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func probe(args ...string) []string { return append([]string{"/bin/probe"}, args...) }

// podCgroupsGlob lists what pattern (a filepath.Match pattern) matches
// below each of the pod's cgroup directories (cgroupDirs). The pod's
// cgroup's name holds backslashes, which a pattern would take as escapes:
// only the part below it is a pattern.
func podCgroupsGlob(p *Pod, pattern string) []string {
	var out []string
	for _, d := range cgroupDirs(p) {
		m, _ := filepath.Glob(filepath.Join(escapeGlob(d), pattern))
		out = append(out, m...)
	}
	return out
}

// escapeGlob quotes the characters filepath.Match treats specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\*?[`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// cgroupDirs lists the pod's cgroup directories that exist, in any
// hierarchy, at any depth.
func cgroupDirs(p *Pod) []string {
	dirs, err := cgroups.Named(cgroups.PodName(p.UUID))
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests: looking for pod %s's cgroups: %v\n", p.UUID, err)
	}
	return dirs
}
