package tests

import (
	"bufio"
	"context"
	"encoding/json"
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

	"github.com/pod1/pod1/appexec"
)

// The spare (stage1-init/pid1/spare.go) is briefed with its app's spec while
// PID 1 is still in the host's root, sets the app's root up, and must run
// nothing of the app before its go: an app that could read /proc/1/root
// then would find the host's (threats T4, T19). These tests drive the
// app set-up process (pod1-init as pod1-app) directly over its socket, as
// PID 1 does (appexec.SpareBrief, appexec.GoByte), in a mount namespace of
// its own.

// spareProc is a set-up process started as a spare, and our end of its
// socket.
type spareProc struct {
	cmd    *exec.Cmd
	sock   *os.File
	stderr *os.File // our read end of its stderr until the go
	report *os.File // our read end of its report pipe
	// exited is closed once the process has ended and been waited for.
	exited chan struct{}
}

func startSpareProc(t *testing.T) *spareProc {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	ours, theirs := os.NewFile(uintptr(fds[0]), "spare"), os.NewFile(uintptr(fds[1]), "spare-child")
	er, ew, err := os.Pipe()
	must(t, err)
	cmd := exec.Command(bin("pod1-init"))
	cmd.Args = []string{"pod1-app"}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stderr = ew
	// fd 4 its report (the pid of the app's process, which it clones as
	// our child), 5 to 7 held for the descriptors its brief and go bring
	// (as PID 1 starts a spare).
	rr, rw, err := os.Pipe()
	must(t, err)
	t.Cleanup(func() { rr.Close() })
	cmd.ExtraFiles = []*os.File{theirs, rw, theirs, theirs, theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS, Pdeathsig: unix.SIGKILL}
	must(t, cmd.Start())
	theirs.Close()
	ew.Close()
	rw.Close()
	p := &spareProc{cmd: cmd, sock: ours, stderr: er, report: rr, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		ours.Close()
		er.Close()
	})
	return p
}

// brief sends spec framed as PID 1 frames it, with a procfs, the pid
// namespace for the app (ours: the host's, standing in for the apps'), a
// /dev/shm, and cgroupNS unless it is -1.
func (p *spareProc) brief(t *testing.T, spec []byte, cgroupNS int) {
	t.Helper()
	procfs := detachedFS(t, "proc")
	ns, err := os.Open("/proc/self/ns/pid")
	must(t, err)
	defer ns.Close()
	// The pod's /dev/shm: a detached tmpfs.
	shm := detachedFS(t, "tmpfs")
	_, err = unix.SendmsgN(int(p.sock.Fd()), appexec.SpareBrief(spec), appexec.SpareBriefRights(procfs, int(ns.Fd()), shm, cgroupNS), nil, 0)
	must(t, err)
}

// detachedFS is a new detached mount of the file system fstype, closed
// when the test ends.
func detachedFS(t *testing.T, fstype string) int {
	t.Helper()
	fs, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	must(t, err)
	defer unix.Close(fs)
	must(t, unix.FsconfigCreate(fs))
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(m) })
	return m
}

// sendGo sends the go with /dev/null as the app's stdin and stdout and a
// new pipe as its stderr, whose read end it returns.
func (p *spareProc) sendGo(t *testing.T) *os.File {
	t.Helper()
	n, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	must(t, err)
	defer n.Close()
	r, w, err := os.Pipe()
	must(t, err)
	defer w.Close()
	t.Cleanup(func() { r.Close() })
	// stdin, stdout, stderr, and the gate: /dev/null, go at once.
	rights := unix.UnixRights(int(n.Fd()), int(n.Fd()), int(w.Fd()), int(n.Fd()))
	must(t, unix.Sendmsg(int(p.sock.Fd()), []byte{appexec.GoByte}, rights, nil, 0))
	return r
}

// exit waits (bounded) for the process's end and returns its exit code.
func (p *spareProc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the set-up process did not end")
	}
	return p.cmd.ProcessState.ExitCode()
}

// alive reports, after d, that the process has not ended.
func (p *spareProc) alive(d time.Duration) bool {
	select {
	case <-p.exited:
		return false
	case <-time.After(d):
		return true
	}
}

// gateRoot makes an app root holding the probe, and a spec that runs it
// to create /ran in it.
func gateRoot(t *testing.T) (root string, spec []byte) {
	t.Helper()
	root = t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	linkOrCopy(t, bin("probe"), filepath.Join(root, "bin", "probe"))
	spec, err := json.Marshal(map[string]any{
		"app": "gate", "rootfs": root,
		"exec": []string{"/bin/probe", "touch", "/ran"}, "env": []string{"PATH=/bin"},
		"workingDir": "/", "uid": 0, "gid": 0, "groups": []int{},
		"mounts":    []any{map[string]any{"kind": "proc", "target": "/proc"}},
		"isolation": map[string]any{"capabilities": []string{"CAP_DAC_OVERRIDE"}},
	})
	must(t, err)
	return root, spec
}

// A briefed spare sets up and waits: its app runs only after the go, with
// the stdio the go carries; before it the app's root holds nothing of it.
func TestSpareRunsNothingBeforeItsGo(t *testing.T) {
	root, spec := gateRoot(t)
	p := startSpareProc(t)
	p.brief(t, spec, -1)
	if !p.alive(700 * time.Millisecond) {
		t.Fatalf("the spare ended before its go (exit %d)", p.cmd.ProcessState.ExitCode())
	}
	if _, err := os.Stat(filepath.Join(root, "ran")); err == nil {
		t.Fatal("the app ran before its go")
	}
	or := p.sendGo(t)
	if code := p.exit(t); code != 0 {
		b, _ := io.ReadAll(or)
		t.Fatalf("exit %d after the go; stderr: %s", code, b)
	}
	// The app's process, which the spare cloned as our child, runs on.
	waitFor(t, 20*time.Second, "the app run after its go", func() bool {
		_, err := os.Stat(filepath.Join(root, "ran"))
		return err == nil
	})
}

// On a host with only cgroup v2 the brief brings the apps' cgroup
// namespace too, which the spare must put where every set-up finds it
// (appexec.CgroupNSFd, held by a placeholder since its birth): the app's
// process is born in that namespace.
func TestSpareTakesTheAppsCgroupNamespace(t *testing.T) {
	_, spec := gateRoot(t)
	var m map[string]any
	must(t, json.Unmarshal(spec, &m))
	m["exec"], m["cgroupNS"] = []string{"/bin/probe", "sleep", "1h"}, true
	spec, err := json.Marshal(m)
	must(t, err)
	// A cgroup namespace other than ours, held by a process of its own.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := exec.CommandContext(ctx, "unshare", "--cgroup", "sleep", "1h")
	must(t, holder.Start())
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	nsPath := fmt.Sprintf("/proc/%d/ns/cgroup", holder.Process.Pid)
	own, _ := os.Readlink("/proc/self/ns/cgroup")
	var want string
	waitFor(t, 20*time.Second, "unshare's cgroup namespace", func() bool {
		want, _ = os.Readlink(nsPath)
		return want != "" && want != own
	})
	ns, err := os.Open(nsPath)
	must(t, err)
	defer ns.Close()
	p := startSpareProc(t)
	p.brief(t, spec, int(ns.Fd()))
	or := p.sendGo(t)
	if code := p.exit(t); code != 0 {
		b, _ := io.ReadAll(or)
		t.Fatalf("exit %d after the go; stderr: %s", code, b)
	}
	line, err := bufio.NewReader(p.report).ReadString('\n')
	must(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	must(t, err)
	// The app's process is our child: it is killed and reaped here.
	defer func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
	}()
	if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/cgroup", pid)); got != want {
		t.Errorf("the app's cgroup namespace %q, want %q (ours %q)", got, want, own)
	}
}

// A spare whose socket is closed without a go (the pod stops before its
// first app starts, or the app starts otherwise) ends, quietly, having run
// nothing.
func TestSpareWithoutGoRunsNothing(t *testing.T) {
	root, spec := gateRoot(t)
	p := startSpareProc(t)
	p.brief(t, spec, -1)
	time.Sleep(200 * time.Millisecond)
	p.sock.Close()
	if code := p.exit(t); code != 254 {
		t.Errorf("exit %d, want 254", code)
	}
	if _, err := os.Stat(filepath.Join(root, "ran")); err == nil {
		t.Error("the app ran without a go")
	}
	b, _ := io.ReadAll(p.stderr)
	if len(b) != 0 {
		t.Errorf("it said %q", b)
	}
}

// A set-up that fails is told after the go, on the app's stderr the go
// brings (the app's log), as an app started without a spare tells it; and
// a go without the app's stdio is refused.
func TestSpareSetupFailureToldAfterItsGo(t *testing.T) {
	t.Run("failure", func(t *testing.T) {
		_, spec := gateRoot(t)
		spec = []byte(strings.Replace(string(spec), `"rootfs":"`, `"rootfs":"/nonexistent`, 1))
		p := startSpareProc(t)
		p.brief(t, spec, -1)
		if !p.alive(500 * time.Millisecond) {
			t.Fatalf("the spare ended before its go (exit %d)", p.cmd.ProcessState.ExitCode())
		}
		or := p.sendGo(t)
		if code := p.exit(t); code != 254 {
			t.Errorf("exit %d, want 254", code)
		}
		b, _ := io.ReadAll(or)
		if !strings.Contains(string(b), `app "gate": bind rootfs /nonexistent`) {
			t.Errorf("the app's stderr has %q", b)
		}
		if b, _ := io.ReadAll(p.stderr); len(b) != 0 {
			t.Errorf("PID 1's stderr has %q", b)
		}
	})
	t.Run("go without stdio", func(t *testing.T) {
		root, spec := gateRoot(t)
		p := startSpareProc(t)
		p.brief(t, spec, -1)
		_, err := p.sock.Write([]byte{appexec.GoByte})
		must(t, err)
		if code := p.exit(t); code != 254 {
			t.Errorf("exit %d, want 254", code)
		}
		if _, err := os.Stat(filepath.Join(root, "ran")); err == nil {
			t.Error("the app ran")
		}
		if b, _ := io.ReadAll(p.stderr); !strings.Contains(string(b), "wait for the go") {
			t.Errorf("stderr %q", b)
		}
	})
}
