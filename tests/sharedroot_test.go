package tests

// Pods on a host whose mounts are shared, as systemd leaves every host it
// boots (it makes / shared, recursively, so that each mount is in a peer
// group of its own): the pod's own mounts must stay in the pod's mount
// namespaces, and what stage0 mounted for it must be gone after gc, also
// where the data directory is reachable through a second path.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
)

// sharedNS is a mount namespace of the test's own whose mounts are all
// shared, each in a peer group of its own: a systemd host's mount table,
// without touching the machine's (the namespace is made private first,
// so nothing done in it propagates out, on a systemd host either). It
// lives as long as its holder process; commands run in it through
// nsenter.
type sharedNS struct {
	t      *testing.T
	holder *exec.Cmd
	dir    string
}

func newSharedNS(t *testing.T) *sharedNS {
	t.Helper()
	for _, b := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s (util-linux) is missing: %v", b, err)
		}
	}
	n := &sharedNS{t: t, dir: t.TempDir()}
	// The holder waits on its stdin: it ends when the test closes it, or
	// when the test process dies (the pipe closes, and Pdeathsig).
	n.holder = exec.Command("unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", "mount --make-rshared / && echo ready && exec cat >/dev/null")
	n.holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := n.holder.StdinPipe()
	must(t, err)
	out, err := n.holder.StdoutPipe()
	must(t, err)
	n.holder.Stderr = os.Stderr
	must(t, n.holder.Start())
	done := make(chan struct{})
	go func() {
		_ = n.holder.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = in.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = n.holder.Process.Kill()
			<-done
		}
	})
	ready := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		ready <- l
	}()
	select {
	case l := <-ready:
		if l != "ready\n" {
			t.Fatalf("the shared mount namespace could not be made (holder said %q)", l)
		}
	case <-time.After(eventDeadline):
		t.Fatal("the shared mount namespace's holder never said it was ready")
	}
	return n
}

// nsenter is the command line that runs argv in the namespace (in its
// root directory).
func (n *sharedNS) nsenter(argv ...string) []string {
	return append([]string{"nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", n.holder.Process.Pid), "--"}, argv...)
}

// wrap returns a program that runs bin, with its arguments, in the
// namespace: rktEnv runs it in place of rkt.
func (n *sharedNS) wrap(bin string) string {
	n.t.Helper()
	p := filepath.Join(n.dir, filepath.Base(bin)+"-in-ns")
	line := strings.Join(n.nsenter(bin), " ")
	must(n.t, os.WriteFile(p, []byte("#!/bin/sh\nexec "+line+` "$@"`+"\n"), 0o755))
	return p
}

// run runs argv in the namespace, bounded, and returns its output and
// exit code.
func (n *sharedNS) run(argv ...string) (string, int) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	full := n.nsenter(argv...)
	c := exec.CommandContext(ctx, full[0], full[1:]...)
	c.WaitDelay = time.Second
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		n.t.Fatalf("%v timed out", argv)
	}
	code := 0
	if err != nil {
		code = -1
		if c.ProcessState != nil {
			code = c.ProcessState.ExitCode()
		}
	}
	return string(out), code
}

// mounts is the namespace's mount table.
func (n *sharedNS) mounts() []*mountinfo.Info {
	n.t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", n.holder.Process.Pid))
	must(n.t, err)
	defer f.Close()
	infos, err := mountinfo.GetMountsFromReader(f, nil)
	must(n.t, err)
	return infos
}

// mountsUnder lists the namespace's mounts at or below each of dirs.
func (n *sharedNS) mountsUnder(dirs ...string) []string {
	n.t.Helper()
	var out []string
	for _, m := range n.mounts() {
		for _, d := range dirs {
			if m.Mountpoint == d || strings.HasPrefix(m.Mountpoint, d+"/") {
				out = append(out, m.Mountpoint)
			}
		}
	}
	return out
}

// stage0Mount reports whether m is one of the mounts stage0 (rkt's, or
// pod1 run) makes in the host's namespace for a pod of data: the overlay
// of the stage1's root and of each app's.
func stage0Mount(data string, m *mountinfo.Info) bool {
	rel, err := filepath.Rel(filepath.Join(data, "pods/run"), m.Mountpoint)
	if err != nil || m.FSType != "overlay" {
		return false
	}
	p := strings.Split(rel, "/")
	switch {
	case len(p) == 3:
		return p[1] == "stage1" && p[2] == "rootfs"
	case len(p) == 7:
		return p[1] == "stage1" && p[2] == "rootfs" && p[3] == "opt" && p[4] == "stage2" && p[6] == "rootfs"
	}
	return false
}

// bgCmd is a command of the test run in the background, ended by the
// test's cleanup if it is still running then.
type bgCmd struct {
	c    *exec.Cmd
	out  strings.Builder
	done chan struct{}
}

// startBG starts argv, bounded by rktTimeout.
func startBG(t *testing.T, argv ...string) *bgCmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
	b := &bgCmd{c: exec.CommandContext(ctx, argv[0], argv[1:]...), done: make(chan struct{})}
	b.c.Stdout, b.c.Stderr = &b.out, &b.out
	b.c.WaitDelay = time.Second
	if err := b.c.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		_ = b.c.Wait()
		cancel()
		close(b.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-b.done
	})
	return b
}

func (b *bgCmd) ended() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// whileRunning checks the namespace's mount table while the pod pod runs
// (one app on a host volume, gateArgs) and then lets it end. The app
// announces itself on the volume and waits there for the test's go.
func whileRunning(t *testing.T, n *sharedNS, data, vol string, before map[int]bool, pod *bgCmd) {
	t.Helper()
	// Checked until the app has started: a mount that reached the
	// host's namespace is reported even if the pod never gets there.
	foreign := func() []string {
		var out []string
		for _, m := range n.mounts() {
			if !before[m.ID] && !stage0Mount(data, m) {
				out = append(out, fmt.Sprintf("%s (%s %s, %s)", m.Mountpoint, m.FSType, m.Source, m.Optional))
			}
		}
		return out
	}
	deadline := time.Now().Add(eventDeadline)
	for {
		if f := foreign(); len(f) > 0 {
			t.Fatalf("the host's mount namespace has mounts the pod made:\n%s", strings.Join(f, "\n"))
		}
		if _, err := os.Stat(filepath.Join(vol, "started")); err == nil {
			break
		}
		if pod.ended() {
			t.Fatalf("the pod ended before its app started: exit %d\n%s", pod.c.ProcessState.ExitCode(), &pod.out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod's app did not start within %v", eventDeadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stage0 := 0
	for _, m := range n.mounts() {
		if !before[m.ID] && stage0Mount(data, m) {
			stage0++
		}
	}
	if f := foreign(); len(f) > 0 || stage0 != 2 {
		t.Errorf("the host's mount namespace has %d overlays of the pod (want 2: the stage1's and the app's) and these other mounts it made: %v", stage0, f)
	}
	must(t, os.WriteFile(filepath.Join(vol, "go"), nil, 0o644))
	select {
	case <-pod.done:
	case <-time.After(eventDeadline):
		t.Fatal("the pod did not end")
	}
	if code := pod.c.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the pod ended with %d, want 0:\n%s", code, &pod.out)
	}
}

// mountIDs is the set of the namespace's mounts now.
func (n *sharedNS) mountIDs() map[int]bool {
	ids := map[int]bool{}
	for _, m := range n.mounts() {
		ids[m.ID] = true
	}
	return ids
}

// newPod1Data makes a data directory for pod1 run in the namespace, whose
// pods the test's cleanup collects there (a pod1 run the test failed
// during is killed first, which ends its pod).
func newPod1Data(t *testing.T, n *sharedNS) string {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	must(t, os.Mkdir(data, 0o755))
	t.Cleanup(func() {
		ownPodsUnder(data)
		if out, code := n.run(bin("pod1"), "--dir="+data, "gc", "--grace-period=0s"); code != 0 {
			t.Errorf("pod1 gc: exit %d: %s", code, out)
		}
	})
	return data
}

// podsLeft lists the pods gc left in data.
func podsLeft(data string) []string {
	dirs, _ := filepath.Glob(filepath.Join(data, "pods", "*", "*"))
	return dirs
}

// gateArgs is the app of whileRunning: it says it started on the volume
// mounted at /v and waits there for the test's go.
var gateArgs = []string{"--mount=volume=v,target=/v", "--exec=/bin/probe", "--", "touch", "/v/started", "+", "wait-file", "/v/go"}

// On a host whose / is shared, the host's mount namespace sees no mount of
// the stage1's while the pod runs (PID 1's own root, the pod's /dev/shm,
// the apps' roots), only the overlays stage0 made, and after gc nothing of
// the pod is mounted or left, for rkt and pod1 run alike.
func TestSharedRootPodMountsStayInThePod(t *testing.T) {
	n := newSharedNS(t)
	r := newRkt(t)
	r.bin = n.wrap(r.bin)
	img := r.aci("gate", nil, nil)

	vol := t.TempDir()
	before := n.mountIDs()
	rktArgs := r.runArgs("run", append([]string{"--volume=v,kind=host,source=" + vol, img}, gateArgs...))
	whileRunning(t, n, r.data, vol, before, startBG(t, append([]string{r.bin, "--dir=" + r.data, "--insecure-options=image"}, rktArgs...)...))
	r.rkt("gc", "--grace-period=0s")
	if m := n.mountsUnder(r.data); len(m) > 0 {
		t.Errorf("rkt gc left mounts: %v", m)
	}
	if left := podsLeft(r.data); len(left) > 0 {
		t.Errorf("rkt gc left pods: %v", left)
	}

	data := newPod1Data(t, n)
	vol = t.TempDir()
	before = n.mountIDs()
	pod1Args := append([]string{n.wrap(bin("pod1")), "run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none", "--volume=v,kind=host,source=" + vol, img}, gateArgs...)
	whileRunning(t, n, data, vol, before, startBG(t, pod1Args...))
	ownPodsUnder(data)
	if out, code := n.run(bin("pod1"), "--dir="+data, "gc", "--grace-period=0s"); code != 0 {
		t.Errorf("pod1 gc: exit %d: %s", code, out)
	}
	if m := n.mountsUnder(data); len(m) > 0 {
		t.Errorf("pod1 gc left mounts: %v", m)
	}
	if left := podsLeft(data); len(left) > 0 {
		t.Errorf("pod1 gc left pods: %v", left)
	}
}

// A data directory reachable through a second path (a bind mount of
// another directory, as an fstab bind gives on a systemd host, where it
// joins its source's peer group): every overlay stage0 mounts for a pod
// is mounted under both. gc must take both away, or the pod's directory
// cannot be removed (EBUSY), for rkt gc and pod1 gc alike.
func TestSharedRootDataDirBoundElsewhere(t *testing.T) {
	n := newSharedNS(t)
	r := newRkt(t)
	r.bin = n.wrap(r.bin)
	img := r.aci("bound", nil, nil)
	bound := func(data string) string {
		src := filepath.Join(t.TempDir(), "src")
		must(t, os.Mkdir(src, 0o755))
		if out, code := n.run("mount", "--bind", src, data); code != 0 {
			t.Fatalf("mount --bind %s %s: exit %d: %s", src, data, code, out)
		}
		return src
	}

	// The pods' files are in src: the test's own namespace sees the
	// data directory unbound, empty.
	src := bound(r.data)
	if out, errOut, code := r.run(img); code != 0 {
		t.Fatalf("rkt run: exit %d\n%s%s", code, out, errOut)
	}
	ownPodsUnder(src)
	if m := n.mountsUnder(filepath.Join(r.data, "pods"), filepath.Join(src, "pods")); len(m) != 4 {
		t.Errorf("before gc, the pod's two overlays under both paths: got %v", m)
	}
	_, errOut, code := r.exec(rktTimeout, nil, "gc", "--grace-period=0s")
	if code != 0 || strings.Contains(errOut, "unable to remove") {
		t.Errorf("rkt gc: exit %d: %s", code, errOut)
	}
	if m := n.mountsUnder(filepath.Join(r.data, "pods"), filepath.Join(src, "pods")); len(m) > 0 {
		t.Errorf("rkt gc left mounts: %v", m)
	}
	if left := podsLeft(src); len(left) > 0 {
		t.Errorf("rkt gc left pods: %v", left)
	}

	data := newPod1Data(t, n)
	src = bound(data)
	if out, code := n.run(bin("pod1"), "run", "--dir="+data, "--stage1-path="+stage1ACI(t), "--net=none", img); code != 0 {
		t.Fatalf("pod1 run: exit %d: %s", code, out)
	}
	ownPodsUnder(src)
	if out, code := n.run(bin("pod1"), "--dir="+data, "gc", "--grace-period=0s"); code != 0 {
		t.Errorf("pod1 gc: exit %d: %s", code, out)
	}
	if m := n.mountsUnder(filepath.Join(data, "pods"), filepath.Join(src, "pods")); len(m) > 0 {
		t.Errorf("pod1 gc left mounts: %v", m)
	}
	if left := podsLeft(src); len(left) > 0 {
		t.Errorf("pod1 gc left pods: %v", left)
	}
}
