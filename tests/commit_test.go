package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/status"
)

// keeperOf finds the lock keeper among the children of the run process
// pid, the waiter (the Go run starts it with CLONE_PARENT).
func keeperOf(t *testing.T, pid int) int {
	t.Helper()
	var k int
	waitFor(t, eventDeadline, "the lock keeper", func() bool {
		for _, c := range childrenOf(pid) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
			if strings.HasPrefix(string(b), "pod1-lock\x00") {
				k = c
				return true
			}
		}
		return false
	})
	return k
}

// The pod's last final status is committed by the lock keeper, which holds
// the lock outside the pod: PID 1 leaves it pending and ends, and the
// keeper makes it durable and visible while the kernel ends PID 1 (the
// fsyncs no longer come before PID 1's end). Seen with the keeper stopped:
// PID 1 is gone, the status is still pending, invisible under the app's
// name, and the lock is held; once the keeper goes on, the status is
// there before the lock is free.
func TestLastStatusCommittedByTheLockKeeper(t *testing.T) {
	p := newPod(t, []App{
		{Name: "a", Exec: probe("sleep", "1h")},
		{Name: "b", Exec: probe("exit", "3")},
	}, nil)
	r := start(t, p, RunOpts{})
	pid1 := podPid(t, p)
	k := keeperOf(t, r.Cmd.Process.Pid)
	// Its binary is a detached read-only copy, with no path to
	// tell by, but the same file as the waiter's.
	exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", k))
	must(t, err)
	waiterBin, err := os.Stat(bin("pod1-waiter"))
	must(t, err)
	if !os.SameFile(exe, waiterBin) {
		t.Fatal("the keeper is not the waiter's binary")
	}
	pidfd, err := unix.PidfdOpen(pid1, 0)
	must(t, err)
	defer unix.Close(pidfd)
	// b's status comes while a still runs: durable at once,
	// as before.
	waitFor(t, eventDeadline, "b's status", func() bool { return p.Status(t, "b") == 3 })
	must(t, unix.Kill(k, unix.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = unix.Kill(k, unix.SIGCONT)
		}
	}()
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(eventDeadline/time.Millisecond)); n != 1 || err != nil {
		t.Fatalf("PID 1 did not end: %d, %v; stderr %s", n, err, r.Stderr)
	}
	if got := p.Status(t, "a"); got != -1 {
		t.Fatalf("a's status %d visible before the keeper committed it", got)
	}
	// a, which the pod stopped because b failed, records 0, as with
	// rkt's stage1 (its record says SIGTERM).
	pending, err := status.Read(p.statusDir(), "a"+status.PendingSuffix)
	if err != nil || pending != 0 {
		t.Fatalf("a's pending status: %d, %v; want 0", pending, err)
	}
	if !locked(t, p.Dir) {
		t.Fatal("the lock is free while a status is pending")
	}
	must(t, unix.Kill(k, unix.SIGCONT))
	stopped = false
	if code := r.Wait(t); code != 3 {
		t.Fatalf("pod exit %d, want b's 3; stderr %s", code, r.Stderr)
	}
	if got := p.Status(t, "a"); got != 0 {
		t.Fatalf("a's status %d after the commit, want 0", got)
	}
	if _, err := os.Lstat(filepath.Join(p.statusDir(), "a"+status.PendingSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pending status is left: %v", err)
	}
}

// A keeper that is gone (SIGKILLed) commits nothing: PID 1, told so by
// the commit pipe (EPIPE), commits the pod's last statuses itself.
func TestLastStatusWithTheKeeperGone(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{})
	podPid(t, p)
	waitSupervisorReady(t, p)
	k := keeperOf(t, r.Cmd.Process.Pid)
	must(t, unix.Kill(k, unix.SIGKILL))
	// Its parent reaps it only at the pod's end.
	waitFor(t, eventDeadline, "the keeper dead", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", k))
		return err != nil || strings.Contains(string(b), "\nState:\tZ")
	})
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	if got := p.Status(t, "a"); got != 143 {
		t.Fatalf("a's status %d, want 143; stderr %s", got, r.Stderr)
	}
	if _, err := os.Lstat(filepath.Join(p.statusDir(), "a"+status.PendingSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pending status is left: %v", err)
	}
}

// What is planted in the status directory under a pending name is neither
// followed nor opened by the keeper: a symlink to a host file is not
// made an app's status, a FIFO does not block the commit, and the pod ends
// with its own status committed.
func TestKeeperLeavesPlantedPendingNames(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{})
	podPid(t, p)
	waitSupervisorReady(t, p)
	secret := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(secret, []byte("0\n"), 0o600))
	dir := p.statusDir()
	must(t, os.Symlink(secret, filepath.Join(dir, "link"+status.PendingSuffix)))
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"+status.PendingSuffix), 0o600))
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	if got := p.Status(t, "a"); got != 143 {
		t.Fatalf("a's status %d, want 143; stderr %s", got, r.Stderr)
	}
	for _, n := range []string{"link", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("planted %s%s was moved to %s", n, status.PendingSuffix, n)
		}
		if _, err := os.Lstat(filepath.Join(dir, n+status.PendingSuffix)); err != nil {
			t.Errorf("planted %s%s: %v", n, status.PendingSuffix, err)
		}
	}
}

// Under the waiter, the lock keeper's end is not on the pod's way: once
// PID 1 is gone it commits the last statuses, closes its copy of the lock
// and tells the waiter so on the done pipe, then waits for the waiter to
// exit before it exits itself (its exit used to come between the commit
// and the waiter's wake-up). Seen with the waiter stopped: PID 1 is gone,
// the status is final, the keeper no longer holds the lock but is still
// there, and the lock is held (by the waiter); once the waiter goes on
// and exits, so does the keeper.
func TestKeeperLetsGoOfTheLockAndOutlivesTheWaiter(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r, w := startUnderWaiter(t, p)
	pid1 := podPid(t, p)
	k := keeperOf(t, w)
	kpidfd, err := unix.PidfdOpen(k, 0)
	must(t, err)
	defer unix.Close(kpidfd)
	must(t, unix.Kill(w, unix.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = unix.Kill(w, unix.SIGCONT)
		}
	}()
	// PID 1 takes SIGTERM as a stop request, as from the waiter.
	must(t, unix.Kill(pid1, unix.SIGTERM))
	waitFor(t, eventDeadline, "the keeper done with the lock", func() bool {
		_, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", k))
		return errors.Is(err, os.ErrNotExist)
	})
	if got := p.Status(t, "a"); got != 143 {
		t.Fatalf("a's status %d once the keeper let go of the lock, want 143", got)
	}
	if _, err := os.Lstat(filepath.Join(p.statusDir(), "a"+status.PendingSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pending status is left: %v", err)
	}
	if !locked(t, p.Dir) {
		t.Fatal("the lock is free while the waiter runs")
	}
	// The keeper waits for the waiter, without the lock.
	fds := []unix.PollFd{{Fd: int32(kpidfd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, 200); n != 0 {
		t.Fatal("the keeper exited before the waiter")
	}
	must(t, unix.Kill(w, unix.SIGCONT))
	stopped = false
	if code := r.Wait(t); code != 0 {
		t.Fatalf("pod exit %d, want 0; stderr %s", code, r.Stderr)
	}
	if locked(t, p.Dir) {
		t.Fatal("the lock is held once run returned")
	}
	if n, err := unix.Poll(fds, int(eventDeadline/time.Millisecond)); n != 1 || err != nil {
		t.Fatalf("the keeper did not exit after the waiter: %d, %v", n, err)
	}
}

// The lock keeper holds what run hands it (handover.KeeperFiles) and
// nothing else: no mount of the pod's (its log directory), no namespace,
// nothing an app's end could be held up by, and nothing of the pod kept
// alive after PID 1's end.
func TestKeeperHoldsOnlyItsHandOver(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h"),
		Annotations: map[string]string{"coreos.com/rkt/stage2/stdout": "log"}}}, nil)
	r, w := startUnderWaiter(t, p)
	k := keeperOf(t, w)
	var got []string
	for _, fd := range fdsOf(k) {
		n, _, _ := strings.Cut(fd, "=")
		got = append(got, n)
	}
	want := []string{"2", "3", "4", "5", "6"}
	for _, fd := range []int{handover.KeeperLockFd, handover.KeeperPID1Fd, handover.KeeperCommitFd, handover.KeeperDoneFd} {
		if fd > 6 {
			t.Fatalf("handover's keeper fd %d: the test's list is old", fd)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the keeper's fds %q, want %q: %q", got, want, fdsOf(k))
	}
	must(t, unix.Kill(w, unix.SIGTERM))
	if code := r.Wait(t); code != 0 {
		t.Errorf("pod exit %d; stderr %s", code, r.Stderr)
	}
}

// Only the apps PID 1 names to the lock keeper get their pending status
// committed. What a writer in the status directory (an app that reached
// PID 1's root; the test, on the host, stands in for it) plants while the
// pod runs stays where it is: a forged pending status for an app whose
// final status is in place does not replace it, pending names of apps the
// pod never had, a huge file and a symlink do not become statuses, and
// the app still running at the end gets its own status.
func TestKeeperCommitsOnlyWhatPID1Sent(t *testing.T) {
	// b's end does not end the pod: a is its main app.
	apps := []App{
		{Name: "a", Exec: probe("sleep", "1h")},
		{Name: "b", Exec: probe("exit", "3")},
	}
	p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/exit-policy": "main-app", "pod1/main-app": "a"}), apps)
	r := start(t, p, RunOpts{})
	podPid(t, p)
	waitSupervisorReady(t, p)
	waitFor(t, eventDeadline, "b's status", func() bool { return p.Status(t, "b") == 3 })
	dir := p.statusDir()
	plant := func(name, body string) {
		must(t, os.WriteFile(filepath.Join(dir, name+status.PendingSuffix), []byte(body), 0o644))
	}
	plant("a", "0\n")
	plant("b", "0\n")
	var ghosts []string
	for i := range 300 {
		ghosts = append(ghosts, fmt.Sprintf("ghost%d", i))
		plant(ghosts[i], "0\n")
	}
	plant("huge", "")
	must(t, os.Truncate(filepath.Join(dir, "huge"+status.PendingSuffix), 4<<30))
	secret := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(secret, []byte("0\n"), 0o600))
	must(t, os.Symlink(secret, filepath.Join(dir, "link"+status.PendingSuffix)))
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	if got := p.Status(t, "a"); got != 143 {
		t.Errorf("a's status %d, want its own 143; stderr %s", got, r.Stderr)
	}
	if got := p.Status(t, "b"); got != 3 {
		t.Errorf("b's final status %d, want 3: a planted one replaced it", got)
	}
	for _, n := range append(ghosts, "huge", "link") {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("planted %s%s became a status: %v", n, status.PendingSuffix, err)
			break
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "0\n" {
		t.Errorf("the symlink's target: %q, %v", b, err)
	}
}

// A pending status PID 1 named but that is no longer what it wrote when
// the keeper commits it (swapped while the keeper is stopped: a huge file,
// a symlink to a host file) is refused, neither read whole nor followed:
// the app's status stays unknown.
func TestKeeperRefusesASwappedPendingStatus(t *testing.T) {
	p := newPod(t, []App{
		{Name: "a", Exec: probe("sleep", "1h")},
		{Name: "c", Exec: probe("sleep", "1h")},
	}, nil)
	r := start(t, p, RunOpts{})
	pid1 := podPid(t, p)
	waitSupervisorReady(t, p)
	k := keeperOf(t, r.Cmd.Process.Pid)
	pidfd, err := unix.PidfdOpen(pid1, 0)
	must(t, err)
	defer unix.Close(pidfd)
	must(t, unix.Kill(k, unix.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = unix.Kill(k, unix.SIGCONT)
		}
	}()
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(eventDeadline/time.Millisecond)); n != 1 || err != nil {
		t.Fatalf("PID 1 did not end: %d, %v; stderr %s", n, err, r.Stderr)
	}
	dir := p.statusDir()
	for _, n := range []string{"a", "c"} {
		if _, err := status.Read(dir, n+status.PendingSuffix); err != nil {
			t.Fatalf("%s's pending status: %v", n, err)
		}
	}
	huge := filepath.Join(dir, "a"+status.PendingSuffix)
	must(t, os.Truncate(huge, 4<<30))
	secret := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(secret, []byte("0\n"), 0o600))
	must(t, os.Remove(filepath.Join(dir, "c"+status.PendingSuffix)))
	must(t, os.Symlink(secret, filepath.Join(dir, "c"+status.PendingSuffix)))
	must(t, unix.Kill(k, unix.SIGCONT))
	stopped = false
	r.Wait(t)
	for _, n := range []string{"a", "c"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s's swapped pending status was committed: %v", n, err)
		}
	}
	if st, err := os.Stat(huge); err != nil || st.Size() != 4<<30 {
		t.Errorf("the huge pending status: %v", err)
	}
}

// A PID 1 killed before it named anything to the keeper leaves nothing
// committed: a pending status planted for a running app does not become
// its status, which stays unknown (no file), as rkt reads a pod that died.
func TestKeeperCommitsNothingAfterPID1Died(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{})
	pid1 := podPid(t, p)
	waitSupervisorReady(t, p)
	must(t, os.WriteFile(filepath.Join(p.statusDir(), "a"+status.PendingSuffix), []byte("0\n"), 0o644))
	must(t, unix.Kill(pid1, unix.SIGKILL))
	r.Wait(t)
	if got := p.Status(t, "a"); got != -1 {
		t.Errorf("a's status %d after PID 1 died, want none", got)
	}
}

// The lock keeper (the waiter's binary as pod1-lock) reads the commit
// pipe a line at a time, whatever the reads cut: a name split across two
// reads is taken whole; a line that is not an app name (upper case, a
// doubled or edge dash, empty, longer than a pending name may be) is
// dropped, and so is every name past the MaxPending it takes in a pod's
// life. Driven directly, with a child of the test standing in for PID 1:
// the names are sent as PID 1 never would.
func TestKeeperReadsTheCommitPipeLineByLine(t *testing.T) {
	pod := t.TempDir()
	dir := filepath.Join(pod, "st")
	must(t, os.Mkdir(dir, 0o755))
	longest := strings.Repeat("a", 255-len(status.PendingSuffix))
	for _, n := range []string{"web", "db", "a--b", "-a", "Upper", "x", "late", longest} {
		must(t, os.WriteFile(filepath.Join(dir, n+status.PendingSuffix), []byte("7\n"), 0o644))
	}
	lockDir, err := os.Open(pod)
	must(t, err)
	defer lockDir.Close()
	pid1 := exec.Command("sleep", "1h")
	must(t, pid1.Start())
	killed := false
	defer func() {
		if !killed {
			_ = pid1.Process.Kill()
			_ = pid1.Wait()
		}
	}()
	pidfd, err := unix.PidfdOpen(pid1.Process.Pid, 0)
	must(t, err)
	pidfdFile := os.NewFile(uintptr(pidfd), "pidfd")
	defer pidfdFile.Close()
	pr, pw, err := os.Pipe()
	must(t, err)
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*eventDeadline)
	defer cancel()
	k := exec.CommandContext(ctx, bin("pod1-waiter"), "st")
	k.Args[0] = "pod1-lock"
	k.ExtraFiles = []*os.File{lockDir, pidfdFile, pr}
	var stderr bytes.Buffer
	k.Stderr = &stderr
	must(t, k.Start())
	pr.Close()
	send := func(s string) {
		t.Helper()
		if _, err := pw.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	committed := func(n string) bool {
		_, err := os.Lstat(filepath.Join(dir, n))
		return err == nil
	}
	// "d" waits in the keeper for the rest of its line: web is
	// committed from the read that held both.
	send("web\nd")
	waitFor(t, eventDeadline, "web committed", func() bool { return committed("web") })
	send("b\na--b\n-a\n\nUpper\n" + longest + "a\n" + longest + "\n")
	waitFor(t, eventDeadline, "the longest name committed", func() bool { return committed(longest) })
	// Three names taken so far: x fills MaxPending, late is past it.
	send(strings.Repeat("x\n", status.MaxPending-3) + "late\n")
	must(t, pid1.Process.Kill())
	_ = pid1.Wait()
	killed = true
	if err := k.Wait(); err != nil {
		t.Fatalf("the keeper: %v; stderr %s", err, stderr.String())
	}
	for _, n := range []string{"web", "db", longest, "x"} {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err != nil || string(b) != "7\n" {
			t.Errorf("%.20s: committed %q, %v; want 7", n, b, err)
		}
	}
	for _, n := range []string{"a--b", "-a", "Upper", "late"} {
		if committed(n) {
			t.Errorf("%s was committed", n)
		}
	}
	if !strings.Contains(stderr.String(), "lock keeper: commit pipe: a line that names no app, or past the names taken, dropped") {
		t.Errorf("no line about the dropped lines; stderr %s", stderr.String())
	}
}
