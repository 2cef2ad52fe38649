package tests

// Pods registered with systemd-machined as rkt's stage1 registered them,
// machine rkt-<uuid>. They need systemd as PID 1 and machined, so they
// skip elsewhere and run in `make vm-test LAYOUT=systemd`.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// needMachined skips the test unless systemd is PID 1 and machined can be
// reached (machinectl list starts it on demand).
func needMachined(t *testing.T) {
	t.Helper()
	needSystemd(t)
	if _, err := exec.LookPath("machinectl"); err != nil {
		t.Skip("machinectl is missing (Debian's systemd-container): machined cannot run here")
	}
	if out, err := sysTool(t, "machinectl", "list", "--no-legend"); err != nil {
		t.Skipf("machined does not answer here: %v: %s", err, out)
	}
}

// machineProps is `machinectl show` of a machine, nil if machined does not
// know it.
func machineProps(t *testing.T, name string) map[string]string {
	t.Helper()
	out, err := sysTool(t, "machinectl", "show", name)
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// machineListed reports whether `machinectl list` names the machine.
func machineListed(t *testing.T, name string) bool {
	t.Helper()
	out, err := sysTool(t, "machinectl", "list", "--no-legend")
	if err != nil {
		t.Fatalf("machinectl list: %v: %s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// checkRegistered checks the pod's registration as rkt's stage1 made it:
// listed, class container, service rkt, its leader the pod's PID 1, its
// root the stage1's, and its unit the one given.
func (r *rktEnv) checkRegistered(uuid, unit string) {
	r.t.Helper()
	name := "rkt-" + uuid
	// A pod in a unit of its own is registered once PID 1 is in its
	// cgroup, which may come after rkt already reports it running.
	deadline := time.Now().Add(30 * time.Second)
	for !machineListed(r.t, name) {
		if time.Now().After(deadline) {
			out, _ := sysTool(r.t, "machinectl", "list")
			r.t.Fatalf("machinectl list does not name %s:\n%s", name, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := machineProps(r.t, name)
	want := map[string]string{
		"Name":          name,
		"Class":         "container",
		"Service":       "rkt",
		"Leader":        strconv.Itoa(r.pid(uuid)),
		"RootDirectory": filepath.Join(r.data, "pods/run", uuid, "stage1/rootfs"),
		"Unit":          unit,
		"State":         "running",
	}
	for k, v := range want {
		if p[k] != v {
			r.t.Errorf("machinectl show %s: %s=%q, want %q", name, k, p[k], v)
		}
	}
	if out, err := sysTool(r.t, "machinectl", "status", name); err != nil {
		r.t.Errorf("machinectl status %s: %v: %s", name, err, out)
	}
}

// waitUnregistered waits until machined no longer knows the pod.
func waitUnregistered(t *testing.T, uuid, why string) {
	t.Helper()
	waitFor(t, 30*time.Second, "machine rkt-"+uuid+" gone "+why, func() bool {
		return machineProps(t, "rkt-"+uuid) == nil && !machineListed(t, "rkt-"+uuid)
	})
}

// subcgroup is the pod's cgroup as its subcgroup file names it.
func (r *rktEnv) subcgroup(uuid string) string {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.data, "pods/run", uuid, "subcgroup"))
	must(r.t, err)
	return string(b)
}

// scopeName is the scope machined makes for pod uuid, and the name pod1
// gives the pod's cgroup anyway.
func scopeName(uuid string) string {
	return `machine-rkt\x2d` + strings.ReplaceAll(uuid, "-", `\x2d`) + ".scope"
}

// startSandboxUnit starts `rkt app sandbox` (whose --annotation gives the
// pod's annotations) as the unit's main process, and returns the pod's
// UUID once it runs.
func (r *rktEnv) startSandboxUnit(unit string, args ...string) string {
	r.t.Helper()
	uf := filepath.Join(r.dir, "uuid-"+unit)
	a := append([]string{"--unit=" + unit, "--quiet", "--setenv=TMPDIR=" + r.dir, "--setenv=RKT_EXPERIMENT_APP=true", "--",
		r.bin, "--dir=" + r.data, "--insecure-options=image", "app", "sandbox", "--uuid-file-save=" + uf,
		"--stage1-path=" + filepath.Join(repoRoot, "build/stage1.aci"), "--net=none"}, args...)
	if out, err := sysTool(r.t, "systemd-run", a...); err != nil {
		r.t.Fatalf("systemd-run: %v: %s", err, out)
	}
	return r.waitPodOfUnit(unit, uf)
}

// By default (pod1/machined=unit) a pod started outside any unit of its
// own (here: from the suite's service, which holds other processes) is
// not registered: its cgroup stays below its caller's, named
// machine-rkt\x2d<uuid>.scope, and outlives the pod until gc, as rkt's
// TestGCCgroup and TestRmCgroup expect of a pod's cgroups.
func TestMachinedNotOutsideAUnit(t *testing.T) {
	needMachined(t)
	r := newRkt(t)
	img := r.aci("plain", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	p := r.start("run", img)
	if machineProps(t, "rkt-"+p.UUID) != nil || machineListed(t, "rkt-"+p.UUID) {
		t.Errorf("machine rkt-%s registered outside a unit, without pod1/machined=scope", p.UUID)
	}
	sub := r.subcgroup(p.UUID)
	if strings.HasPrefix(sub, "machine.slice/") || filepath.Base(sub) != scopeName(p.UUID) {
		t.Errorf("subcgroup %q, want one below the caller's named %s", sub, scopeName(p.UUID))
	}
	must(t, unix.Kill(r.appPid(p.UUID, "plain"), unix.SIGKILL))
	p.wait(t)
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", sub)); err != nil {
		t.Errorf("the pod's cgroup is gone before gc: %v", err)
	}
}

// pod1/machined=scope registers a pod started outside any unit of its own
// in the scope machined makes for it,
// machine.slice/machine-rkt\x2d<uuid>.scope, where rkt's stage1 had it
// and which the subcgroup file names. `machinectl terminate` stops it
// (lock free) and the machine is gone.
func TestMachinedScopePod(t *testing.T) {
	needMachined(t)
	r := newRkt(t)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none",
		"--annotation=pod1/machined=scope")
	scope := scopeName(p.UUID)
	r.checkRegistered(p.UUID, scope)
	if got, want := r.subcgroup(p.UUID), "machine.slice/"+scope; got != want {
		t.Errorf("subcgroup %q, want %q", got, want)
	}
	if cg := unitProp(t, scope, "ControlGroup"); cg != "/machine.slice/"+scope {
		t.Errorf("%s's ControlGroup %q", scope, cg)
	}
	cgroupBelowUnit(t, scope, r.pid(p.UUID))
	// What the journal tools make of the machine (docs/conformance.md):
	// shown, not checked.
	for _, a := range [][]string{
		{"-M", "rkt-" + p.UUID},
		{"-m", "POD1_POD_UUID=" + p.UUID},
		{"-u", scope},
	} {
		out, err := sysTool(t, "journalctl", append([]string{"--no-pager", "-n", "5"}, a...)...)
		t.Logf("journalctl %s: %v\n%s", strings.Join(a, " "), err, out)
	}
	if out, err := sysTool(t, "machinectl", "terminate", "rkt-"+p.UUID); err != nil {
		t.Fatalf("machinectl terminate: %v: %s", err, out)
	}
	p.wait(t)
	dirs, _ := filepath.Glob(filepath.Join(r.data, "pods/*", p.UUID))
	if len(dirs) != 1 || locked(t, dirs[0]) {
		t.Fatalf("pod directory %v locked after machinectl terminate", dirs)
	}
	waitUnregistered(t, p.UUID, "after machinectl terminate")
}

// `machinectl poweroff` sends the machine's leader, the pod's PID 1,
// SIGRTMIN+4, which systemd in rkt's stage1 took as "power off": the pod
// stops gracefully.
func TestMachinedPoweroff(t *testing.T) {
	needMachined(t)
	r := newRkt(t)
	img := r.aci("off", map[string]any{"exec": []string{"/bin/probe", "term-exit", "7", "+", "sleep", "1h"}}, nil)
	unit := newUnitName(t)
	uuid := r.startPodUnit(unit, nil, img)
	r.checkRegistered(uuid, unit)
	if out, err := sysTool(t, "machinectl", "poweroff", "rkt-"+uuid); err != nil {
		t.Fatalf("machinectl poweroff: %v: %s", err, out)
	}
	waitFor(t, 60*time.Second, unit+" ended after machinectl poweroff", func() bool {
		s := unitProp(t, unit, "ActiveState")
		return s == "inactive" || s == "failed"
	})
	if st := r.status(uuid); st.State != "exited" || st.appExit("off") != 7 {
		t.Fatalf("after machinectl poweroff: pod %s, app exit %d; want exited, 7", st.State, st.appExit("off"))
	}
	waitUnregistered(t, uuid, "after machinectl poweroff")
}

// A pod that ends by itself, and one whose PID 1 is SIGKILLed, leave no
// machine behind.
func TestMachinedGoneWhenPodEnds(t *testing.T) {
	needMachined(t)
	for _, c := range []struct{ name, app string }{{"ends", "ends"}, {"PID 1 killed", "killed"}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRkt(t)
			img := r.aci(c.app, map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
			unit := newUnitName(t)
			uuid := r.startPodUnit(unit, nil, img)
			r.checkRegistered(uuid, unit)
			victim := r.appPid(uuid, c.app)
			if c.app == "killed" {
				victim = r.pid(uuid)
			}
			must(t, unix.Kill(victim, unix.SIGKILL))
			waitUnregistered(t, uuid, c.name)
		})
	}
}

// `systemd-run --unit=NAME rkt run`: the pod stays in the unit (its
// limits, systemctl stop) and is registered as the unit's machine, as
// systemd-nspawn --keep-unit registered rkt's; `machinectl terminate`
// stops the unit, which stops the pod in order.
func TestMachinedUnitPod(t *testing.T) {
	needMachined(t)
	r := newRkt(t)
	img := r.aci("unitreg", map[string]any{"exec": []string{"/bin/probe", "term-exit", "7", "+", "sleep", "1h"}}, nil)
	unit := newUnitName(t)
	uuid := r.startPodUnit(unit, nil, img)
	cgroupBelowUnit(t, unit, r.appPid(uuid, "unitreg"))
	r.checkRegistered(uuid, unit)
	if out, err := sysTool(t, "machinectl", "terminate", "rkt-"+uuid); err != nil {
		t.Fatalf("machinectl terminate: %v: %s", err, out)
	}
	waitFor(t, 60*time.Second, unit+" stopped by machinectl terminate", func() bool {
		s := unitProp(t, unit, "ActiveState")
		return s == "inactive" || s == "failed"
	})
	st := r.status(uuid)
	if st.State != "exited" || st.appExit("unitreg") != 7 {
		t.Fatalf("after machinectl terminate: pod %s, app exit %d; want exited, 7 (its SIGTERM handler)", st.State, st.appExit("unitreg"))
	}
	dirs, _ := filepath.Glob(filepath.Join(r.data, "pods/*", uuid))
	if len(dirs) != 1 || locked(t, dirs[0]) {
		t.Fatalf("pod directory %v locked after machinectl terminate", dirs)
	}
	waitUnregistered(t, uuid, "after its unit stopped")
}

// pod1/machined=no keeps a pod that runs in a unit of its own out of
// machined (rkt app sandbox --annotation).
func TestMachinedAnnotationOff(t *testing.T) {
	needMachined(t)
	r := newRkt(t)
	unit := newUnitName(t)
	uuid := r.startSandboxUnit(unit, "--annotation=pod1/machined=no")
	if machineProps(t, "rkt-"+uuid) != nil {
		t.Errorf("pod1/machined=no: machine rkt-%s registered", uuid)
	}
	if out, err := sysTool(t, "systemctl", "stop", unit); err != nil {
		t.Errorf("systemctl stop %s: %v: %s", unit, err, out)
	}
}

// A pod1/machined value other than unit, scope or no refuses the pod with
// 254 before anything starts, naming the annotation (on any host).
func TestMachinedAnnotationBad(t *testing.T) {
	r := newRkt(t)
	out, errOut, code := r.exec(rktTimeout, nil, "app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"),
		"--net=none", "--annotation=pod1/machined=off")
	if code != 254 || !strings.Contains(errOut, `pod1/machined: "off"`) {
		t.Errorf("pod1/machined=off: exit %d, want 254 naming the annotation\n%s%s", code, out, errOut)
	}
}
