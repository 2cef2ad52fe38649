package tests

// Upgrades: pods started by the oldest stage1 the project still supports
// run on after the host's pod1 is upgraded, and today's CLI drives them.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// oldestStage1 is the oldest stage1 the project still supports: the last
// commit of 2026-11-30, the first stage1 users ran (mutable pods, the
// status files and records, enter, stop and gc as today). Its pods keep
// no logs, answer app/stop of an app that is not running with exit 5 and
// keep their app specs where PID 1 of today does not.
const oldestStage1 = "c74bc7d5effd02ccd1edac42b49c7d989710cba9"

// oldStage1Cache holds the old stage1 images, built once per commit.
const oldStage1Cache = "/var/tmp/pod1-old-stage1"

// oldStage1Timeout bounds the old stage1's build (a cold Go cache
// downloads that commit's modules).
var oldStage1Timeout = max(15*time.Minute, eventDeadline)

// oldStage1 returns the image of commit's stage1, built from git into the
// cache on first use (under a lock, so concurrent runs build it once).
// Without the commit in git (a shallow clone), the test is skipped,
// saying so.
func oldStage1(t *testing.T, commit string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), oldStage1Timeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "-C", repoRoot, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("the old stage1's commit %s is not in this clone's git history (%v: %s): the upgrade test needs a full clone", commit, err, out)
	}
	must(t, os.MkdirAll(oldStage1Cache, 0o755))
	// /var/tmp is everyone's: a cache someone else made could hand the
	// test their stage1 to run as root.
	if fi, err := os.Lstat(oldStage1Cache); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 ||
		fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("%s is not a directory of root's that only root may write (%v): remove it", oldStage1Cache, err)
	}
	aci := filepath.Join(oldStage1Cache, commit+".aci")
	lock, err := os.OpenFile(filepath.Join(oldStage1Cache, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	defer lock.Close()
	must(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
	if _, err := os.Stat(aci); err == nil {
		return aci
	}
	build, err := os.MkdirTemp(oldStage1Cache, commit+".build-")
	must(t, err)
	defer func() { _ = os.RemoveAll(build) }()
	script := `set -e
git -C "$1" archive "$2" | tar -x -C "$3"
make -C "$3" build/stage1.aci VERSION="old-$2" MAKEFLAGS= MAKELEVEL=`
	c := exec.CommandContext(ctx, "sh", "-c", script, "sh", repoRoot, commit, build)
	c.WaitDelay = 5 * time.Second
	c.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("building the stage1 of %s: %v (within %v): %s", commit, err, oldStage1Timeout, out)
	}
	must(t, os.Rename(filepath.Join(build, "build/stage1.aci"), aci))
	return aci
}

// oldSandbox starts `pod1 app sandbox` (today's pod1) with the given
// stage1 and returns the data directory and the UUID; the pod is stopped
// at the end.
func oldSandbox(t *testing.T, stage1 string) (string, string) {
	t.Helper()
	data := dataDir(t)
	uuidFile := filepath.Join(t.TempDir(), "uuid")
	ctx, cancel := context.WithTimeout(context.Background(), 2*eventDeadline)
	cmd := exec.CommandContext(ctx, bin("pod1"), "app", "sandbox", "--dir="+data, "--stage1-path="+stage1, "--net=none", "--uuid-file-save="+uuidFile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(eventDeadline):
			_ = cmd.Process.Kill()
			<-done
		}
		cancel()
		if t.Failed() {
			t.Logf("sandbox stderr: %s", stderr.String())
		}
	})
	var uuid string
	waitFor(t, 30*time.Second, "the old sandbox is ready", func() bool {
		select {
		case <-done:
			t.Fatalf("pod1 app sandbox with the old stage1 ended early: %s", stderr.String())
		default:
		}
		b, err := os.ReadFile(uuidFile)
		if err != nil || len(b) == 0 {
			return false
		}
		uuid = strings.TrimSpace(string(b))
		_, err = os.Readlink(filepath.Join(data, "pods/run", uuid, layout.SupervisorStatus))
		return err == nil
	})
	ownPod(uuid)
	t.Cleanup(func() {
		if code, _ := pod1cli(t, nil, "--dir="+data, "status", uuid); code == 0 {
			pod1cli(t, nil, "--dir="+data, "stop", "--force", uuid)
		}
	})
	return data, uuid
}

// TestUpgradeOldestStage1PodsWithTodaysCLI: a mutable pod of the oldest
// supported stage1 is driven by today's pod1: app add, start, status,
// list, enter, app rm of an exited app (the old app/stop says exit 5 for
// it), a journal entry it cannot finish (which never blocks the other
// apps), logs (one line: the pod kept none), stop and gc.
func TestUpgradeOldestStage1PodsWithTodaysCLI(t *testing.T) {
	old := oldStage1(t, oldestStage1)
	data, uuid := oldSandbox(t, old)
	img := probeACIDir(t)
	d := "--dir=" + data
	pod := filepath.Join(data, "pods/run", uuid)

	if code, out := pod1cli(t, nil, d, "app", "add", uuid, img, "--name=quits", "--exec=/bin/probe", "--", "exit", "3"); code != 0 {
		t.Fatalf("app add: %d %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "app", "start", uuid, "--app=quits"); code != 0 {
		t.Fatalf("app start: %d %s", code, out)
	}
	waitFor(t, eventDeadline, "quits exited 3", func() bool {
		s, e := appState(t, data, uuid, "quits")
		return s == "exited" && e == "3"
	})
	// The old app/stop exits 5 for an app that is not running.
	if code, out := pod1cli(t, nil, d, "app", "rm", uuid, "--app=quits"); code != 0 {
		t.Fatalf("app rm of an exited app: %d %s", code, out)
	}
	assertAppGone(t, data, uuid, "quits")

	if code, out := pod1cli(t, nil, d, "app", "add", uuid, img, "--name=sleeper", "--exec=/bin/probe", "--", "sleep", "1h"); code != 0 {
		t.Fatalf("app add after the rm: %d %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "app", "start", uuid, "--app=sleeper"); code != 0 {
		t.Fatalf("app start sleeper: %d %s", code, out)
	}
	waitFor(t, eventDeadline, "sleeper running", func() bool {
		s, _ := appState(t, data, uuid, "sleeper")
		return s == "running"
	})

	// A journal entry no pod1 can finish (an operation of another
	// pod1): reported, refused for its app, never for the others; an
	// rm of that app clears it.
	must(t, os.WriteFile(filepath.Join(pod, layout.AppOpsDir, "ghost"), []byte("frobnicate\n"), 0o640))
	code, out := pod1cli(t, nil, d, "app", "add", uuid, img, "--name=other", "--exec=/bin/probe", "--", "exit", "0")
	if code != 0 || !strings.Contains(out, `app ghost: journal: unknown operation "frobnicate"`) {
		t.Fatalf("app add beside an unfinished entry: %d, want 0 and a warning naming ghost: %s", code, out)
	}
	code, out = pod1cli(t, nil, d, "app", "start", uuid, "--app=ghost")
	if code != 254 || !strings.Contains(out, "pod1 app rm "+uuid+" --app=ghost retries it") {
		t.Errorf("app start of the unfinished app: %d, want 254 and the way out: %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "app", "rm", uuid, "--app=ghost"); code != 0 {
		t.Fatalf("app rm of the unfinished app: %d %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "app", "rm", uuid, "--app=other"); code != 0 || strings.Contains(out, "warning") {
		t.Fatalf("app rm after the entry is cleared: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(pod, layout.AppOpsDir, "ghost")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ghost's journal entry is still there: %v", err)
	}

	if code, out := pod1cli(t, nil, d, "enter", "--app=sleeper", uuid, "/bin/probe", "exit", "4"); code != 4 {
		t.Errorf("enter: %d, want the command's 4: %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "status", uuid); code != 0 || !strings.Contains(out, "state=running") {
		t.Errorf("status: %d %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "list"); code != 0 || !strings.Contains(out, "sleeper") {
		t.Errorf("list: %d %s", code, out)
	}
	// The old stage1 kept no logs: said so, not an empty success.
	code, out = pod1cli(t, nil, d, "logs", uuid)
	if code != 254 || !strings.Contains(out, "has no logs") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("logs of a pod that kept none: %d, want 254 and one line: %q", code, out)
	}

	if code, out := pod1cli(t, nil, d, "stop", uuid); code != 0 {
		t.Fatalf("stop: %d %s", code, out)
	}
	waitFor(t, eventDeadline, "the old pod exited", func() bool {
		_, out := pod1cli(t, nil, d, "status", uuid)
		return strings.Contains(out, "state=exited")
	})
	if code, out := pod1cli(t, nil, d, "gc", "--grace-period=0s"); code != 0 {
		t.Fatalf("gc: %d %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "gc", "--grace-period=0s"); code != 0 {
		t.Fatalf("second gc: %d %s", code, out)
	}
	if m, _ := filepath.Glob(filepath.Join(data, "pods", "*", uuid)); len(m) != 0 {
		t.Errorf("gc left the old pod: %v", m)
	}
}
