package cgroups

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TryRemove never waits: a group that still holds a process is left in
// place at once with EBUSY, and removed by a later call once it is empty
// (a directory already gone is no error). PID 1's loop relies on it
// (stage1-init/pid1's appOS.Sweep).
func TestTryRemoveNeverWaits(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it creates a cgroup and moves a process into it (run as root, as make test does)")
	}
	v2, v1, err := mounts()
	if err != nil {
		t.Fatal(err)
	}
	g := &Group{}
	name := "pod1-test-tryremove-" + strconv.Itoa(os.Getpid())
	switch {
	case v1["pids"] != "":
		g.V1 = map[string]string{"pids": filepath.Join(v1["pids"], name)}
	case v2 != "":
		g.V2 = filepath.Join(v2, name)
	default:
		t.Skip("no cgroup hierarchy to test with")
	}
	dir := g.trackDir()
	must(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() { _ = unix.Rmdir(dir) })
	cmd := exec.Command("sleep", "1h")
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	must(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0))

	t0 := time.Now()
	err = g.TryRemove()
	if !errors.Is(err, unix.EBUSY) {
		t.Fatalf("TryRemove of a group with a process: %v, want EBUSY", err)
	}
	// Remove would have retried for 100 ms and more.
	if d := time.Since(t0); d > 50*time.Millisecond {
		t.Fatalf("TryRemove took %v", d)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the busy group is gone: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for deadline := time.Now().Add(time.Minute); ; {
		err = g.TryRemove()
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the emptied group stayed busy")
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TryRemove of the emptied group: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied group is still there: %v", err)
	}
	if err := g.TryRemove(); err != nil {
		t.Fatalf("TryRemove of a group already gone: %v", err)
	}
}

// UnifiedOf names the cgroup a process is in, and refuses one removed
// since: a zombie still names its cgroup, with " (deleted)" after it, and
// machined's adoption must not take that name for a live scope.
func TestUnifiedOfRefusesARemovedCgroup(t *testing.T) {
	dir := scratchUnified(t, "unifiedof", "it creates a cgroup and moves a process into it (run as root, as make test does)")
	cg, err := os.Open(dir)
	must(t, err)
	defer cg.Close()
	cmd := exec.Command("sleep", "1h")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	if got, err := UnifiedOf(pid); err != nil || got != dir {
		t.Fatalf("UnifiedOf(%d) = %q, %v; want %s", pid, got, err, dir)
	}
	// Killed and not reaped: a zombie, which leaves its cgroup empty.
	must(t, cmd.Process.Signal(unix.SIGKILL))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := unix.Rmdir(dir); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("rmdir %s after its process was killed: %v", dir, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, err := UnifiedOf(pid)
	if err == nil || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("UnifiedOf(%d) of a removed cgroup = %q, %v; want an error that it is removed", pid, got, err)
	}
}

// scratchUnified makes an empty cgroup of this test's in the host's
// cgroup2 tree, removed at the test's end (once its processes are gone),
// or skips the test, saying why it needs root, where it cannot.
func scratchUnified(t *testing.T, name, why string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: " + why)
	}
	v2, _, err := mounts()
	if err != nil || v2 == "" {
		t.Skip("no cgroup2 mount")
	}
	dir := filepath.Join(v2, "pod1-test-"+name+"-"+strconv.Itoa(os.Getpid()))
	must(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() { _ = unix.Rmdir(dir) })
	return dir
}
