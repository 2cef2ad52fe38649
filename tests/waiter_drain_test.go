package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// Processes in the pod's cgroups that the kernel does not kill with the
// pod's pid namespace (an entered command's parent is one: it stays
// outside it, in the app's cgroups) are killed by the waiter before it
// exits and frees the lock, in a directory below the pod's cgroup too.
// The waiter first only reads (cgroup v2's cgroup.events for the whole
// tree, each v1 directory's cgroup.procs) and kills only what that finds:
// here one process sits in a v1 directory two levels down, where only the
// walk of the v1 tree sees it, and another in the v2 one, where only the
// populated count does.
func TestWaiterKillsWhatIsLeftInThePodsCgroups(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r, pid := startUnderWaiter(t, p)
	ns := holdNS(t, podPid(t, p))
	g := podCgroup(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), cgDeadline)
	defer cancel()
	var left []*exec.Cmd
	place := func(what string, dirs []string) {
		if len(dirs) == 0 {
			return
		}
		c := exec.CommandContext(ctx, "sleep", "60")
		must(t, c.Start())
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		for _, d := range dirs {
			sub := filepath.Join(d, "leftover", "deeper")
			must(t, os.MkdirAll(sub, 0o755))
			must(t, os.WriteFile(filepath.Join(sub, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0))
		}
		t.Logf("%s: pid %d in %v", what, c.Process.Pid, dirs)
		left = append(left, c)
	}
	var v1 []string
	for _, d := range g.V1 {
		v1 = append(v1, d)
	}
	place("v1", v1)
	if g.V2 != "" {
		place("v2", []string{g.V2})
	}
	must(t, unix.Kill(pid, unix.SIGTERM))
	if code := r.Wait(t); code != 0 {
		t.Errorf("pod exit %d, want 0; stderr %s", code, r.Stderr)
	}
	// Dead when the waiter exited: zombies of ours, waiting to be reaped.
	for _, c := range left {
		var ws unix.WaitStatus
		if wp, err := unix.Wait4(c.Process.Pid, &ws, unix.WNOHANG, nil); wp != c.Process.Pid || err != nil || ws.Signal() != unix.SIGKILL {
			t.Errorf("pid %d not killed when the waiter exited: wait4 %d %v %v", c.Process.Pid, wp, err, ws)
		}
		_ = c.Process.Release()
	}
	checkOver(t, p, ns, r)
	if got := p.Status(t, "a"); got != 143 {
		t.Errorf("app a: status %d, want 143", got)
	}
}
