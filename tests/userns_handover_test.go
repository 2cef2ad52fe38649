package tests

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// hungFUSE mounts at dir a FUSE file system whose server never answers,
// not even the kernel's first request: every lookup in it blocks (killably)
// until the connection is aborted. It is a hung network or FUSE mount as a
// host may have one, made deterministic. The connection is aborted (by
// closing the device) and the mount detached when the test ends.
func hungFUSE(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no FUSE device (%v): the hung mount this test needs cannot be made", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd)
	if err := unix.Mount("pod1-hung", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Fatalf("mount a FUSE file system at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		// Closing the device aborts the connection: what waited in it
		// fails with ENOTCONN.
		unix.Close(fd)
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// The user-namespace hand-over does not block PID 1. App "stuck" runs in
// a user namespace, and its set-up process hangs on a hung file system:
// the image's /etc is a FUSE mount whose server never answers, where the
// set-up binds /etc/hosts (run, which checks the pod before PID 1 starts,
// never looks there: the app's ids are numbers). So the set-up never
// reports the app's process. Meanwhile PID 1 starts the other app, records
// its end at once, and carries out a stop at once: the set-up is killed
// (137), and the pod ends before the set-up's report deadline (30 s).
// Blocking on the report, as PID 1 did, it would start "b" only after
// that deadline, and act on the stop no sooner. No wait here is bounded
// by a time shorter than the event deadline: what shows PID 1 blocked is
// the order of events, whatever the machine's speed. "b" ended while
// "stuck" was still starting (past the report deadline it would have
// ended, 137), and the stop, not the deadline, ended the set-up (PID 1
// logs the deadline).
func TestUserNSHandOverDoesNotBlockPID1(t *testing.T) {
	p := newPod(t, []App{
		{Name: "stuck", Exec: probe("sleep", "1h")},
		{Name: "b", Exec: probe("sleep", "200ms")},
	}, nil)
	shiftOwnership(t, p, usersBase)
	hungFUSE(t, filepath.Join(p.Dir, layout.AppRootfs("stuck"), "etc"))
	t0 := time.Now()
	r := start(t, p, RunOpts{Args: []string{"--net=none", "--debug", privateUsers}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pod %s, stage1 stderr:\n%s", p.UUID, r.Stderr)
		}
	})
	for p.Status(t, "b") != 0 {
		if time.Since(t0) > eventDeadline {
			out, _ := exec.Command("ps", "-eo", "pid,ppid,stat,wchan:32,args").CombinedOutput()
			t.Fatalf("b's status not written within %v; processes:\n%s", eventDeadline, out)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("b ended %v after the start", time.Since(t0))
	rec, err := status.ReadRecord(p.statusDir(), "stuck")
	must(t, err)
	if rec.State != status.StateRunning || rec.Pid != 0 || p.Status(t, "stuck") != -1 {
		t.Fatalf("stuck while its set-up hangs: record %+v, status %d", rec, p.Status(t, "stuck"))
	}
	// enter waits for a starting app instead of failing at once with
	// "not running": it is still waiting a second later, and ends when
	// the stop ends the start, saying the app is not running any more.
	type entered struct {
		stderr string
		code   int
	}
	enterDone := make(chan entered, 1)
	go func() {
		_, e, code := podEnter(t, p, "stuck", "/bin/probe", "true")
		enterDone <- entered{e, code}
	}()
	select {
	case e := <-enterDone:
		t.Fatalf("enter on the starting app ended at once: %d %s", e.code, e.stderr)
	case <-time.After(time.Second):
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	select {
	case e := <-enterDone:
		if e.code == 0 || !strings.Contains(e.stderr, `app "stuck" is not running (exited)`) {
			t.Errorf("enter on the app stopped while starting: %d %s", e.code, e.stderr)
		}
	case <-time.After(eventDeadline):
		t.Errorf("enter still waiting %v after the stop", eventDeadline)
	}
	r.Wait(t)
	t.Logf("the pod ended %v after the start", time.Since(t0))
	if strings.Contains(r.Stderr.String(), "has not reported the app's process and") {
		t.Fatalf("the set-up was ended by its report deadline, not by the stop: PID 1 waited for it")
	}
	if got := p.Status(t, "stuck"); got != 137 {
		t.Errorf("stuck: status %d, want 137 (its set-up killed)", got)
	}
	if r.Code != 0 {
		t.Errorf("pod exit %d, want 0", r.Code)
	}
	t.Logf("pod %s", p.UUID)
}
