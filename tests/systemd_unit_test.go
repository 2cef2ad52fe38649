package tests

// Pods started the way rkt's users started them on systemd hosts: `rkt
// run` as a transient unit of `systemd-run` and as a `.service` unit.
// They need systemd as PID 1, so they skip elsewhere (a host or container
// without it) and run in `make vm-test LAYOUT=systemd`, which boots the
// host's systemd in a VM on Debian's stock kernel.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// needSystemd skips the test unless systemd is PID 1 here, with its tools.
func needSystemd(t *testing.T) {
	t.Helper()
	comm, _ := os.ReadFile("/proc/1/comm")
	if strings.TrimSpace(string(comm)) != "systemd" {
		t.Skipf("systemd is not PID 1 here (PID 1 is %q): these tests run in `make vm-test LAYOUT=systemd`", strings.TrimSpace(string(comm)))
	}
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		t.Skip("systemd is PID 1 but /run/systemd/system is missing: systemd did not boot this system")
	}
	for _, c := range []string{"systemd-run", "systemctl", "journalctl"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("systemd is PID 1 but %s is missing: %v", c, err)
		}
	}
}

// sysTool runs a systemd tool to its end, bounded, and returns its output.
func sysTool(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, name, args...)
	c.WaitDelay = 5 * time.Second
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s %s: not done within %v", name, strings.Join(args, " "), rktTimeout)
	}
	return string(out), err
}

// unitProp is one property of a unit, as `systemctl show` gives it.
func unitProp(t *testing.T, unit, prop string) string {
	t.Helper()
	out, err := sysTool(t, "systemctl", "show", "--property="+prop, "--value", unit)
	if err != nil {
		t.Fatalf("systemctl show %s %s: %v: %s", prop, unit, err, out)
	}
	return strings.TrimSpace(out)
}

// newUnitName is a unit name of this test alone; the unit is stopped and
// forgotten when the test ends, also when it fails half-way.
func newUnitName(t *testing.T) string {
	t.Helper()
	u := "pod1-test-" + newUUID(t)[:8] + ".service"
	t.Cleanup(func() {
		// A transient unit the test stopped itself is gone already
		// ("not loaded"), which is no failure.
		if out, err := sysTool(t, "systemctl", "stop", u); err != nil && !strings.Contains(out, "not loaded") {
			t.Errorf("cleanup: systemctl stop %s: %v: %s", u, err, out)
		}
		// A transient unit that ended well is gone already, and
		// reset-failed then fails: only a failed one needs it.
		_, _ = sysTool(t, "systemctl", "reset-failed", u)
	})
	return u
}

// podUnitArgs is the `rkt run` command line of a unit: the test's data
// directory, our stage1, no network, the UUID saved to uf.
func (r *rktEnv) podUnitArgs(uf string, args ...string) []string {
	full := append([]string{r.bin, "--dir=" + r.data, "--insecure-options=image"},
		r.runArgs("run", append([]string{"--uuid-file-save=" + uf}, args...))...)
	return full
}

// waitPodOfUnit waits for the unit's pod to run and returns its UUID.
func (r *rktEnv) waitPodOfUnit(unit, uf string) string {
	r.t.Helper()
	var uuid string
	waitFor(r.t, 30*time.Second, "the pod of "+unit+" saved its UUID", func() bool {
		b, err := os.ReadFile(uf)
		if err == nil && len(b) > 0 {
			uuid = strings.TrimSpace(string(b))
			ownPod(uuid)
			return true
		}
		if s := unitProp(r.t, unit, "ActiveState"); s == "failed" || s == "inactive" {
			out, _ := sysTool(r.t, "journalctl", "--no-pager", "-u", unit)
			r.t.Fatalf("%s is %s before its pod ran:\n%s", unit, s, out)
		}
		return false
	})
	waitFor(r.t, 30*time.Second, "the pod of "+unit+" is running", func() bool {
		return r.podState(uuid) == "running"
	})
	return uuid
}

// startPodUnit runs `rkt run ARGS` as the transient unit of systemd-run,
// with extra unit properties, and returns the pod's UUID once it runs.
func (r *rktEnv) startPodUnit(unit string, props []string, args ...string) string {
	r.t.Helper()
	uf := filepath.Join(r.dir, "uuid-"+unit)
	a := []string{"--unit=" + unit, "--quiet", "--setenv=TMPDIR=" + r.dir}
	for _, p := range props {
		a = append(a, "--property="+p)
	}
	a = append(a, "--")
	if out, err := sysTool(r.t, "systemd-run", append(a, r.podUnitArgs(uf, args...)...)...); err != nil {
		r.t.Fatalf("systemd-run: %v: %s", err, out)
	}
	return r.waitPodOfUnit(unit, uf)
}

// cgroupBelowUnit checks that pid's cgroup (v2, where systemd keeps its
// units) is inside the unit's own cgroup: systemd's accounting, limits and
// `systemctl stop` reach all of the pod. Where the pod's cgroup sits below
// the unit is pod1's choice; this holds whatever it names it.
func cgroupBelowUnit(t *testing.T, unit string, pid int) {
	t.Helper()
	ucg := unitProp(t, unit, "ControlGroup")
	if ucg == "" {
		t.Fatalf("%s has no ControlGroup", unit)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	var cg string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			cg = p
		}
	}
	// Not fatal: what the pod does under systemd is still worth checking.
	if !strings.HasPrefix(cg, ucg+"/") {
		t.Errorf("pid %d is in cgroup %q, not below %s's %q", pid, cg, unit, ucg)
	}
}

// journalMsgs is the MESSAGE of every journal entry that matches.
func journalMsgs(t *testing.T, matches ...string) []string {
	t.Helper()
	out, err := sysTool(t, "journalctl", append([]string{"--no-pager", "--output=json"}, matches...)...)
	if err != nil {
		t.Fatalf("journalctl %v: %v: %s", matches, err, out)
	}
	var msgs []string
	for _, l := range strings.Split(out, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		if m, ok := e["MESSAGE"].(string); ok {
			msgs = append(msgs, m)
		}
	}
	return msgs
}

func hasMsg(msgs []string, line string) bool {
	for _, m := range msgs {
		if strings.Contains(m, line) {
			return true
		}
	}
	return false
}

// checkJournal waits for an app's line in the journal (by the pod's UUID,
// as pod1 tags it), then checks that the unit's journal has it under the
// app's name: `journalctl -u UNIT SYSLOG_IDENTIFIER=APP`, which journald
// answers from the cgroup of the process that sent the line.
func checkJournal(t *testing.T, unit, uuid, app, line string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%q of %s in the journal", line, app), func() bool {
		return hasMsg(journalMsgs(t, "POD1_POD_UUID="+uuid, "POD1_APP="+app), line)
	})
	if out, err := sysTool(t, "journalctl", "--sync"); err != nil {
		t.Fatalf("journalctl --sync: %v: %s", err, out)
	}
	if !hasMsg(journalMsgs(t, "-u", unit, "SYSLOG_IDENTIFIER="+app), line) {
		t.Errorf("%q of %s is in the journal but not in %s's (journalctl -u)", line, app, unit)
	}
}

// stopUnitChecksPod stops the unit with `systemctl stop` and checks that
// the pod ended as a stopped pod does: the app's graceful stop ran (it
// exits with 7 on SIGTERM), rkt reports the pod exited with that status,
// the pod's lock is free and nothing of the unit is left.
func (r *rktEnv) stopUnitChecksPod(unit, uuid, app string) {
	r.t.Helper()
	if out, err := sysTool(r.t, "systemctl", "stop", unit); err != nil {
		r.t.Fatalf("systemctl stop %s: %v: %s", unit, err, out)
	}
	if s := unitProp(r.t, unit, "ActiveState"); s != "inactive" && s != "failed" {
		r.t.Fatalf("%s is %s after systemctl stop", unit, s)
	}
	st := r.status(uuid)
	if st.State != "exited" || st.appExit(app) != 7 {
		r.t.Fatalf("after systemctl stop: pod %s, app %s exit %d; want exited, 7 (its SIGTERM handler)", st.State, app, st.appExit(app))
	}
	dirs, _ := filepath.Glob(filepath.Join(r.data, "pods/*", uuid))
	if len(dirs) != 1 {
		r.t.Fatalf("pod directory of %s: %v", uuid, dirs)
	}
	if locked(r.t, dirs[0]) {
		r.t.Fatal("the pod's lock is still held after systemctl stop")
	}
	if cg := unitProp(r.t, unit, "ControlGroup"); cg != "" {
		if _, err := os.Stat("/sys/fs/cgroup" + cg); err == nil {
			procs, _ := os.ReadFile("/sys/fs/cgroup" + cg + "/cgroup.procs")
			r.t.Fatalf("%s's cgroup %s is still there after stop (procs %q)", unit, cg, procs)
		}
	}
}

// `systemd-run --unit=... rkt run ...`, as rkt's users started pods: the
// pod is inside the unit's cgroup, its apps' output is in the unit's
// journal under each app's name, and `systemctl stop` (KillMode=
// control-group: SIGTERM to every process of the unit at once) ends it as
// a stopped pod: statuses final, lock free.
func TestSystemdRunPodStopsCleanly(t *testing.T) {
	needSystemd(t)
	r := newRkt(t)
	img := r.aci("sysrun", map[string]any{"exec": []string{"/bin/probe", "term-exit", "7", "+", "sleep", "1h"}}, nil)
	unit := newUnitName(t)
	uuid := r.startPodUnit(unit, nil, img)
	cgroupBelowUnit(t, unit, r.appPid(uuid, "sysrun"))
	checkJournal(t, unit, uuid, "sysrun", "term-exit ready")
	r.stopUnitChecksPod(unit, uuid, "sysrun")
}

// The same pod as a unit file, with KillMode=mixed as rkt's documentation
// has it: only `rkt run` (the stage1's run entry point) gets SIGTERM, and
// the pod's own stop must end the apps before systemd kills what is left.
func TestSystemdServiceUnitPod(t *testing.T) {
	needSystemd(t)
	r := newRkt(t)
	img := r.aci("svc", map[string]any{"exec": []string{"/bin/probe", "term-exit", "7", "+", "sleep", "1h"}}, nil)
	unit := newUnitName(t)
	uf := filepath.Join(r.dir, "uuid-"+unit)
	file := "/run/systemd/system/" + unit
	body := fmt.Sprintf("[Unit]\nDescription=pod1 test pod\n\n[Service]\nEnvironment=TMPDIR=%s\nExecStart=%s\nKillMode=mixed\n",
		r.dir, strings.Join(r.podUnitArgs(uf, img), " "))
	must(t, os.WriteFile(file, []byte(body), 0o644))
	t.Cleanup(func() {
		if err := os.Remove(file); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if out, err := sysTool(t, "systemctl", "daemon-reload"); err != nil {
			t.Errorf("cleanup: systemctl daemon-reload: %v: %s", err, out)
		}
	})
	if out, err := sysTool(t, "systemctl", "daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v: %s", err, out)
	}
	if out, err := sysTool(t, "systemctl", "start", unit); err != nil {
		t.Fatalf("systemctl start %s: %v: %s", unit, err, out)
	}
	uuid := r.waitPodOfUnit(unit, uf)
	cgroupBelowUnit(t, unit, r.appPid(uuid, "svc"))
	checkJournal(t, unit, uuid, "svc", "term-exit ready")
	r.stopUnitChecksPod(unit, uuid, "svc")
}

// A pod in a unit of its own (not delegated: systemd-run's default) still
// gets its limits: a pids limit holds a fork bomb and a memory isolator
// OOM-kills the app that goes over it, recorded as such.
func TestSystemdUnitPodLimitsEnforced(t *testing.T) {
	needSystemd(t)
	r := newRkt(t)
	bomb := r.aci("bomb", map[string]any{"exec": []string{"/bin/probe", "forkbomb"}}, nil)
	patchManifest(t, bomb, `"annotations":[{"name":"pod1/pids-max","value":"16"}],`)
	unit := newUnitName(t)
	uuid := r.startPodUnit(unit, nil, bomb)
	pid := r.appPid(uuid, "bomb")
	cgroupBelowUnit(t, unit, pid)
	checkJournal(t, unit, uuid, "bomb", "forkbomb stopped after")
	pmax := cgroupFile(t, pid, "pids", "pids.max")
	if b, err := os.ReadFile(pmax); err != nil || strings.TrimSpace(string(b)) != "16" {
		t.Fatalf("%s: %q %v, want 16", pmax, b, err)
	}
	if out, err := sysTool(t, "systemctl", "stop", unit); err != nil {
		t.Fatalf("systemctl stop %s: %v: %s", unit, err, out)
	}

	hog := r.aci("hog", map[string]any{
		"exec":      []string{"/bin/probe", "hog", "256M"},
		"isolators": []map[string]any{{"name": "resource/memory", "value": map[string]any{"limit": "48Mi"}}},
	}, nil)
	unit = newUnitName(t)
	uuid = r.startPodUnitEnded(unit, hog)
	if st := r.status(uuid); st.appExit("hog") != 137 {
		out, _ := sysTool(t, "journalctl", "--no-pager", "-u", unit)
		t.Fatalf("hog over its 48Mi: exit %d, want 137 (%+v); the unit's journal:\n%s", st.appExit("hog"), st, out)
	}
	rec, err := status.ReadRecord(filepath.Join(r.data, "pods/run", uuid, "stage1/rootfs/rkt/status"), "hog")
	must(t, err)
	if rec.LastFailure != status.ReasonOOM {
		t.Fatalf("hog's record %+v, want lastFailure oom", rec)
	}
}

// startPodUnitEnded runs a pod that ends by itself as a systemd-run unit
// and waits for the unit to end; it returns the pod's UUID.
func (r *rktEnv) startPodUnitEnded(unit string, args ...string) string {
	r.t.Helper()
	uf := filepath.Join(r.dir, "uuid-"+unit)
	a := append([]string{"--unit=" + unit, "--quiet", "--setenv=TMPDIR=" + r.dir, "--"}, r.podUnitArgs(uf, args...)...)
	if out, err := sysTool(r.t, "systemd-run", a...); err != nil {
		r.t.Fatalf("systemd-run: %v: %s", err, out)
	}
	waitFor(r.t, 30*time.Second, unit+" ended", func() bool {
		s := unitProp(r.t, unit, "ActiveState")
		return s == "inactive" || s == "failed"
	})
	b, err := os.ReadFile(uf)
	if err != nil || len(b) == 0 {
		out, _ := sysTool(r.t, "journalctl", "--no-pager", "-u", unit)
		r.t.Fatalf("%s ended without a pod (%v):\n%s", unit, err, out)
	}
	uuid := strings.TrimSpace(string(b))
	ownPod(uuid)
	return uuid
}

// A pod on a systemd host has its journal, as rkt's stage1's journald gave
// it, where rkt's users read it (rkt's Documentation/commands.md): while
// it runs, `journalctl -M rkt-<uuid> -t <app>` (machined opens the root of
// the machine's leader, pod1's PID 1); the host's /var/log/journal/<machine
// id> links to it (rkt's TestJournalLink reads the link); after the pod,
// `journalctl -m _MACHINE_ID=<machine id>` reads it through the link, and
// rkt gc removes the link.
func TestSystemdPodJournal(t *testing.T) {
	needSystemd(t)
	r := newRkt(t)
	img := r.aci("sysjournal", map[string]any{"exec": []string{"/bin/probe", "term-exit", "7", "+", "sleep", "1h"}}, nil)
	unit := newUnitName(t)
	uuid := r.startPodUnit(unit, nil, img)
	// -M asks machined, which knows the pod once PID 1 is in its
	// cgroup, which may come after rkt reports it running.
	r.checkRegistered(uuid, unit)
	mid := layout.MachineID(uuid)
	waitFor(t, 30*time.Second, "the app's line in journalctl -M rkt-"+uuid, func() bool {
		return hasMsg(journalMsgs(t, "-M", "rkt-"+uuid, "-t", "sysjournal"), "term-exit ready")
	})
	link := filepath.Join(layout.HostJournalDir, mid)
	_, herr := os.Stat(layout.HostJournalDir)
	if herr == nil {
		want := filepath.Join(r.data, "pods/run", uuid, layout.PodJournalDir, mid)
		if got, err := os.Readlink(link); err != nil || got != want {
			t.Errorf("%s: %q, %v; want a link to %s", link, got, err, want)
		}
	}
	r.stopUnitChecksPod(unit, uuid, "sysjournal")
	if herr != nil {
		t.Logf("no %s here: the host keeps no persistent journal to link into", layout.HostJournalDir)
		return
	}
	if !hasMsg(journalMsgs(t, "-m", "_MACHINE_ID="+mid, "-t", "sysjournal"), "term-exit ready") {
		t.Errorf("journalctl -m _MACHINE_ID=%s: the app's line is not there after the pod", mid)
	}
	r.rkt("gc", "--grace-period=0s")
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after rkt gc: %v", link, err)
	}
}
