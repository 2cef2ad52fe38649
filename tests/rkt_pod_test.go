package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// rkt prepare + rkt run-prepared: the prepared pod is listed as prepared,
// then runs with our stage1 and exits with its app's code.
func TestRktPrepareRunPrepared(t *testing.T) {
	r := newRkt(t)
	img := r.aci("prep", map[string]any{"exec": []string{"/bin/probe", "exit", "4"}}, nil)
	uuid := strings.TrimSpace(r.rkt("prepare", "--quiet", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), img))
	if s := r.status(uuid); s.State != "prepared" {
		t.Fatalf("after prepare: state %q, want prepared", s.State)
	}
	out, errOut, code := r.exec(rktTimeout, nil, "run-prepared", "--net=none", uuid)
	if code != 4 {
		t.Fatalf("run-prepared: exit %d, want 4\n%s%s", code, out, errOut)
	}
	if s := r.status(uuid); s.State != "exited" || s.appExit("prep") != 4 {
		t.Errorf("after run-prepared: %+v", s)
	}
}

// rkt status and rkt list show as a pod's start the pid file's mtime
// (contract §4): it is when the run entry point began, not when the pid
// file was written once PID 1 was ready, which is later by the whole start
// (on an emulated VM by more than rkt's TestRktListCreatedStarted allows).
// The default network makes that start long: the pod's options, recorded
// after the network's set-up, must be later than the start shown.
func TestRktStartedIsWhenTheRunBegan(t *testing.T) {
	r := newRkt(t)
	img := r.aci("started", map[string]any{"exec": []string{"/bin/probe", "exit", "0"}}, nil)
	uuid := strings.TrimSpace(r.rkt("prepare", "--quiet", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), img))
	before := time.Now()
	if out, errOut, code := r.exec(rktTimeout, nil, "run-prepared", "--net=default", uuid); code != 0 {
		t.Fatalf("run-prepared: exit %d\n%s%s", code, out, errOut)
	}
	m := regexp.MustCompile(`(?m)^started=(.+)$`).FindStringSubmatch(r.rkt("status", uuid))
	if m == nil {
		t.Fatal("rkt status: no started= line")
	}
	// rkt's own layout (rkt/status.go), to the millisecond.
	started, err := time.Parse("2006-01-02 15:04:05.999 -0700 MST", m[1])
	if err != nil {
		t.Fatalf("rkt status: started=%q: %v", m[1], err)
	}
	fi, err := os.Stat(filepath.Join(r.data, "pods/exited-garbage", uuid, layout.OptionsFile))
	if errors.Is(err, os.ErrNotExist) {
		fi, err = os.Stat(filepath.Join(r.data, "pods/run", uuid, layout.OptionsFile))
	}
	if err != nil {
		t.Fatal(err)
	}
	if started.Before(before.Truncate(time.Millisecond)) || !started.Before(fi.ModTime()) {
		t.Errorf("rkt status: started=%v; want from %v (rkt run-prepared) to before %v (the pod's options, after its network)",
			started, before, fi.ModTime())
	}
}

// rkt enter runs a command in a running app; rkt stop stops the pod
// gracefully (the app's SIGTERM handler runs), and the pod's PID 1 is gone
// when rkt reports it exited; rkt gc then removes it and its mounts.
func TestRktEnterStopGc(t *testing.T) {
	r := newRkt(t)
	img := r.aci("srv", map[string]any{"exec": []string{"/bin/probe", "term-exit", "0", "+", "sleep", "1h"}}, nil)
	p := r.start("run", img)
	pid := r.pid(p.UUID)
	out := r.rkt("enter", p.UUID, "/bin/probe", "hostname", "+", "ids")
	if !hasLine(out, "^hostname rkt-"+p.UUID+"$") || !hasLine(out, "^ids uid=0 gid=0 ") {
		t.Errorf("rkt enter output: %q", out)
	}
	r.rkt("stop", p.UUID)
	if code := p.wait(t); code != 0 {
		t.Errorf("rkt run after rkt stop: exit %d, want 0 (the app's handler exited 0)\n%s", code, p.errb)
	}
	if s := r.status(p.UUID); s.State != "exited" || s.appExit("srv") != 0 {
		t.Errorf("after stop: %+v", s)
	}
	if err := unix.Kill(pid, 0); err == nil {
		t.Errorf("the pod's PID 1 (%d) is alive after rkt stop finished", pid)
	}
	r.rkt("gc", "--grace-period=0s")
	if _, _, code := r.exec(rktTimeout, nil, "status", p.UUID); code == 0 {
		t.Errorf("rkt status of a gc'd pod succeeded")
	}
	if entries, _ := os.ReadDir(filepath.Join(r.data, "pods/exited-garbage")); len(entries) != 0 {
		t.Errorf("pods left after gc: %v", entries)
	}
	if m := mountsUnder(t, r.data); len(m) > 0 {
		t.Errorf("mounts left after gc: %v", m)
	}
}

// rkt stop --force kills an app at once, with no SIGTERM first. The app
// reports a SIGTERM on its output and lives on: a stop that was not
// forced shows as that line (it is then killed when its grace period is
// over, 137 as well), whatever the time it took.
func TestRktStopForce(t *testing.T) {
	r := newRkt(t)
	img := r.aci("stubborn", map[string]any{"exec": []string{"/bin/probe", "report-term", "+", "sleep", "1h"}}, nil)
	p := r.start("run", img)
	statusDir := filepath.Join(r.data, "pods/run", p.UUID, layout.StatusDir)
	waitFor(t, 30*time.Second, "the app catching SIGTERM", func() bool {
		rec, err := status.ReadRecord(statusDir, "stubborn")
		return err == nil && rec.Pid > 0 && catches(rec.Pid, unix.SIGTERM)
	})
	t0 := time.Now()
	r.rkt("stop", "--force", p.UUID)
	// A stop from outside ends the pod with 0 (docs/supervision.md); the
	// app's own status says what ended it.
	if code := p.wait(t); code != 0 {
		t.Errorf("rkt run after stop --force: exit %d, want 0", code)
	}
	t.Logf("stop --force took %v", time.Since(t0))
	if s := r.status(p.UUID); s.appExit("stubborn") != 137 {
		t.Errorf("after stop --force: %+v", s)
	}
	if strings.Contains(p.out.String(), "term received") {
		t.Errorf("stop --force sent SIGTERM: %q", p.out)
	}
}

// The app API: a sandbox, an app added, started, listed, stopped and
// removed through rkt app, then the sandbox stopped.
func TestRktAppAPI(t *testing.T) {
	r := newRkt(t)
	img := r.aci("worker", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	short := r.aci("short", map[string]any{"exec": []string{"/bin/probe", "exit", "6"}}, nil)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	// app add finds images in the store only (pull policy never).
	r.rkt("fetch", img, short)
	r.rkt("app", "add", p.UUID, "pod1.test/worker", "--name=worker")
	r.rkt("app", "add", p.UUID, "pod1.test/short", "--name=short")
	if out := r.rkt("app", "list", "--no-legend", p.UUID); !hasLine(out, `^worker\s+.*created`) {
		t.Errorf("app list after add: %q", out)
	}
	r.rkt("app", "start", p.UUID, "--app=worker")
	r.rkt("app", "start", p.UUID, "--app=short")
	waitFor(t, 20*time.Second, "worker running, short exited", func() bool {
		out, _, _ := r.exec(rktTimeout, nil, "app", "list", "--no-legend", p.UUID)
		return hasLine(out, `^worker\s+.*running`) && hasLine(out, `^short\s+.*exited`)
	})
	if out := r.rkt("app", "status", p.UUID, "--app=short"); !hasLine(out, "^exit_code=6$") {
		t.Errorf("app status short: %q", out)
	}
	r.rkt("app", "stop", p.UUID, "--app=worker")
	if out := r.rkt("app", "status", p.UUID, "--app=worker"); !hasLine(out, "^state=exited$") {
		t.Errorf("app status worker after stop: %q", out)
	}
	// rm of exited apps: rkt calls app/stop first, which must succeed.
	r.rkt("app", "rm", p.UUID, "--app=worker")
	r.rkt("app", "rm", p.UUID, "--app=short")
	if out := r.rkt("app", "list", "--no-legend", p.UUID); strings.TrimSpace(out) != "" {
		t.Errorf("app list after rm: %q", out)
	}
	r.rkt("stop", p.UUID)
	p.wait(t)
}

// An app added again under a removed app's name gets its final status as
// any app does, whether it ends while the sandbox runs (b, PID 1's own
// write) or with the sandbox's stop (c, the lock keeper's commit): rkt's
// app rm removes the old status in the overlay's upper directory, under
// the mounted overlay, which used to fail every later status written
// under the name, so that rkt showed the app running or with no code.
func TestRktAppReaddedUnderARemovedName(t *testing.T) {
	r := newRkt(t)
	first := r.aci("first", map[string]any{"exec": []string{"/bin/probe", "exit", "3"}}, nil)
	ends := r.aci("ends", map[string]any{"exec": []string{"/bin/probe", "exit", "5"}}, nil)
	runs := r.aci("runs", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	r.rkt("fetch", first, ends, runs)
	exited := func(names ...string) {
		t.Helper()
		waitFor(t, 20*time.Second, fmt.Sprintf("%v exited", names), func() bool {
			out, _, _ := r.exec(rktTimeout, nil, "app", "list", "--no-legend", p.UUID)
			for _, n := range names {
				if !hasLine(out, `^`+n+`\s+.*exited`) {
					return false
				}
			}
			return true
		})
	}
	for _, n := range []string{"b", "c"} {
		r.rkt("app", "add", p.UUID, "pod1.test/first", "--name="+n)
		r.rkt("app", "start", p.UUID, "--app="+n)
	}
	exited("b", "c")
	for _, n := range []string{"b", "c"} {
		r.rkt("app", "rm", p.UUID, "--app="+n)
	}
	r.rkt("app", "add", p.UUID, "pod1.test/ends", "--name=b")
	r.rkt("app", "add", p.UUID, "pod1.test/runs", "--name=c")
	r.rkt("app", "start", p.UUID, "--app=b")
	r.rkt("app", "start", p.UUID, "--app=c")
	exited("b")
	if out := r.rkt("app", "status", p.UUID, "--app=b"); !hasLine(out, "^exit_code=5$") {
		t.Errorf("app status of the re-added b: %q", out)
	}
	r.rkt("stop", p.UUID)
	p.wait(t)
	s := r.status(p.UUID)
	if b, c := s.appExit("b"), s.appExit("c"); b != 5 || c != 143 {
		t.Errorf("rkt status: b exited %d, c %d; want 5, 143\nstderr: %s", b, c, p.errb)
	}
}
