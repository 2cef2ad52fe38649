package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/status"
)

// cgroupFile is the path of file in the cgroup of pid in the hierarchy
// that has ctrl (v1), or in the v2 hierarchy when none does.
func cgroupFile(t *testing.T, pid int, ctrl, file string) string {
	t.Helper()
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	mountOf := func(v1 bool) string {
		for _, l := range strings.Split(string(mi), "\n") {
			f := strings.Fields(l)
			for i, x := range f {
				if x != "-" || i+3 >= len(f) {
					continue
				}
				if !v1 && f[i+1] == "cgroup2" {
					return f[4]
				}
				if v1 && f[i+1] == "cgroup" {
					for _, o := range strings.Split(f[i+3], ",") {
						if o == ctrl {
							return f[4]
						}
					}
				}
			}
		}
		return ""
	}
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		for _, c := range strings.Split(parts[1], ",") {
			if c == ctrl {
				return filepath.Join(mountOf(true), parts[2], file)
			}
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		if strings.HasPrefix(l, "0::") {
			return filepath.Join(mountOf(false), strings.TrimPrefix(l, "0::"), file)
		}
	}
	t.Fatalf("pid %d has no cgroup for %s", pid, ctrl)
	return ""
}

// inV1Hierarchy reports whether pid's cgroup for ctrl is in a v1
// hierarchy (a v1-only or hybrid host) rather than the unified one.
func inV1Hierarchy(t *testing.T, pid int, ctrl string) bool {
	t.Helper()
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && parts[0] != "0" {
			for _, c := range strings.Split(parts[1], ",") {
				if c == ctrl {
					return true
				}
			}
		}
	}
	return false
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return strings.TrimSpace(string(b))
}

// The resource isolators land in the app's own cgroup (read from the host
// while the app runs), and do what they say from inside.
func TestResourceLimitsInTheAppsCgroup(t *testing.T) {
	isos := []map[string]any{
		isolator("resource/memory", map[string]any{"limit": "96Mi"}),
		isolator("resource/cpu", map[string]any{"limit": "250m"}),
		isolator("os/linux/cpu-shares", 512),
	}
	p := isoPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}, {Name: "b", Exec: probe("sleep", "1h")}}, Isolators{"a": isos}, nil)
	r := start(t, p, RunOpts{})
	a, b := appPid(t, p, "a"), appPid(t, p, "b")
	// What the isolators write: v1 files where the host has the controller
	// in a v1 hierarchy, else the v2 files, with cpu.shares mapped onto
	// cpu.weight as the cgroups package maps it. dflt is what an app
	// without isolators has ("" when the kernel's default is not fixed).
	type limit struct{ ctrl, file, want, dflt string }
	v1 := []limit{
		{"memory", "memory.limit_in_bytes", strconv.Itoa(96 << 20), ""},
		{"cpu", "cpu.cfs_quota_us", "25000", "-1"},
		{"cpu", "cpu.shares", "512", "1024"},
	}
	v2 := []limit{
		{"memory", "memory.max", strconv.Itoa(96 << 20), "max"},
		{"cpu", "cpu.max", "25000 100000", "max 100000"},
		{"cpu", "cpu.weight", strconv.FormatInt(cgroups.SharesToWeight(512), 10), "100"},
	}
	for i := range v1 {
		c := v1[i]
		if !inV1Hierarchy(t, a, c.ctrl) {
			c = v2[i]
		}
		f := cgroupFile(t, a, c.ctrl, c.file)
		if got := readTrim(t, f); got != c.want {
			t.Errorf("%s = %q, want %q", f, got, c.want)
		}
		// The other app, without isolators, has the defaults.
		if got := readTrim(t, cgroupFile(t, b, c.ctrl, c.file)); got == c.want || c.dflt != "" && got != c.dflt {
			t.Errorf("app without isolators: %s = %q, want %q", c.file, got, c.dflt)
		}
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
}

// resource/cpu caps the CPU time the app gets: half a second of CPU takes
// at least about two seconds under 250m, and the kernel counts the app's
// throttled periods; an app without the isolator beside it is never
// throttled (negative control). The apps burn an amount of CPU, not of
// wall time, so a slow or loaded machine only makes the limited app
// slower; one so loaded that even the free app gets less than the limit
// cannot show throttling, which is then not asserted.
func TestCPULimitThrottles(t *testing.T) {
	burn := probe("burn-cpu", "500ms", "+", "sleep", "1h")
	p := isoPod(t, []App{{Name: "limited", Exec: burn}, {Name: "free", Exec: burn}},
		Isolators{"limited": {isolator("resource/cpu", map[string]any{"limit": "250m"})}}, nil)
	r := start(t, p, RunOpts{})
	limited, free := appPid(t, p, "limited"), appPid(t, p, "free")
	waitFor(t, 0, "both apps' burns", func() bool { return len(r.Lines("burn-cpu ")) == 2 })
	wall := map[string]float64{}
	for _, l := range r.Lines("burn-cpu ") {
		var app string
		var w float64
		if _, err := fmt.Sscanf(l, "burn-cpu %s wall %f", &app, &w); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		wall[app] = w
	}
	if wall["limited"] < 1.5 {
		t.Errorf("limited to 250m, 0.5s of CPU took %.3fs", wall["limited"])
	}
	if n := nrThrottled(t, free); n != 0 {
		t.Errorf("without a limit, throttled %d times", n)
	}
	if share := 0.5 / wall["free"]; share < 0.3 {
		t.Logf("the free app got %.0f%% of a CPU: too loaded a machine to see a 250m limit throttle", 100*share)
	} else if n := nrThrottled(t, limited); n == 0 {
		t.Errorf("limited to 250m, never throttled (the free app got %.0f%% of a CPU)", 100*share)
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
}

// nrThrottled reads how many CFS periods pid's cgroup was throttled in.
func nrThrottled(t *testing.T, pid int) int {
	t.Helper()
	f := cgroupFile(t, pid, "cpu", "cpu.stat")
	for _, l := range strings.Split(readTrim(t, f), "\n") {
		if v, ok := strings.CutPrefix(l, "nr_throttled "); ok {
			n, err := strconv.Atoi(v)
			must(t, err)
			return n
		}
	}
	t.Fatalf("%s has no nr_throttled (no cpu controller there?)", f)
	return 0
}

// An app that outgrows its memory limit is OOM-killed, and its status
// record says so; the same app without the limit completes (negative
// control).
func TestMemoryLimitOOMIsRecorded(t *testing.T) {
	p := isoPod(t, []App{{Name: "hog", Exec: probe("hog", "256M")}},
		Isolators{"hog": {isolator("resource/memory", map[string]any{"limit": "48Mi"})}}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 137 || p.Status(t, "hog") != 137 {
		t.Fatalf("exit %d, status %d, want 137; stdout %q stderr %s", r.Code, p.Status(t, "hog"), r.Stdout, r.Stderr)
	}
	rec, err := status.ReadRecord(p.statusDir(), "hog")
	must(t, err)
	if rec.LastFailure != status.ReasonOOM || rec.Signal != "SIGKILL" {
		t.Fatalf("record %+v, want lastFailure oom", rec)
	}
	p = newPod(t, []App{{Name: "hog", Exec: probe("hog", "256M")}}, nil)
	r = runPod(t, p, RunOpts{})
	if r.Code != 0 || !strings.Contains(r.Stdout.String(), "hog done 256") {
		t.Fatalf("without a limit: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if rec, err := status.ReadRecord(p.statusDir(), "hog"); err != nil || rec.LastFailure != "" {
		t.Fatalf("without a limit: record %+v %v", rec, err)
	}
}

// os/linux/oom-score-adj is the app's /proc/self/oom_score_adj; apps
// without it keep the pod's. Lowering it needs CAP_SYS_RESOURCE on the
// host: a stage1 without it refuses the app rather than run it with
// another score.
func TestOOMScoreAdj(t *testing.T) {
	p := isoPodNamed(t, []App{
		{Name: "high", Exec: probe("cat", "/proc/self/oom_score_adj")},
		{Name: "plain", Exec: probe("cat", "/proc/self/oom_score_adj")},
	}, Isolators{"high": {isolator("os/linux/oom-score-adj", 700)}}, nil)
	r := runPod(t, p, RunOpts{})
	own := readTrim(t, "/proc/self/oom_score_adj")
	if got := appLines(r, "cat "); r.Code != 0 || !slices.Equal(got["high"], []string{"cat 700"}) || !slices.Equal(got["plain"], []string{"cat " + own}) {
		t.Fatalf("exit %d, oom_score_adj by app %q (want high 700, plain %s); %s", r.Code, got, own, r.Stderr)
	}
	p = isoPod(t, []App{{Name: "low", Exec: probe("cat", "/proc/self/oom_score_adj")}},
		Isolators{"low": {isolator("os/linux/oom-score-adj", -300)}}, nil)
	r = runPod(t, p, RunOpts{})
	if hasCap(t, unix.CAP_SYS_RESOURCE) {
		if r.Code != 0 || r.Line(t, "cat ") != "cat -300" {
			t.Fatalf("exit %d %q %s", r.Code, r.Stdout, r.Stderr)
		}
		return
	}
	if r.Code != 254 || !strings.Contains(r.Stderr.String(), `app "low": isolator os/linux/oom-score-adj: write "-300" to /proc/self/oom_score_adj: permission denied`) {
		t.Fatalf("without CAP_SYS_RESOURCE: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
}

// hasCap reports whether the test itself has capability c.
func hasCap(t *testing.T, c int) bool {
	t.Helper()
	for _, l := range strings.Split(readTrim(t, "/proc/self/status"), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			must(t, err)
			return m&(1<<uint(c)) != 0
		}
	}
	return false
}
