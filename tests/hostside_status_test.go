package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/layout"
)

const rktTimeLayout = "2006-01-02 15:04:05.999 -0700 MST"

func mtime(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	return fi.ModTime()
}

// statusJSON is rkt's api/v1 Pod as `rkt status --format=json` prints it.
type statusJSON struct {
	Name      string   `json:"name"`
	State     string   `json:"state"`
	AppNames  []string `json:"app_names"`
	CreatedAt *int64   `json:"created_at"`
	StartedAt *int64   `json:"started_at"`
	Apps      []struct {
		Name       string `json:"name"`
		State      string `json:"state"`
		CreatedAt  *int64 `json:"created_at"`
		StartedAt  *int64 `json:"started_at"`
		FinishedAt *int64 `json:"finished_at"`
		ExitCode   *int32 `json:"exit_code"`
		ImageID    string `json:"image_id"`
		Record     *struct {
			State        string `json:"state"`
			Pid          int    `json:"pid"`
			ExitCode     *int   `json:"exit_code"`
			Signal       string `json:"signal"`
			RestartCount int    `json:"restart_count"`
			FinishedAt   *int64 `json:"finished_at"`
			StoppedByPod bool   `json:"stopped_by_pod"`
		} `json:"record"`
	} `json:"apps"`
}

// status and list print rkt's fields, checked one by one, on a pod whose
// apps end with known codes: while it runs and after.
func TestHostsideStatusAndList(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	p := runBG(t, data, img, "--name=ok", "--exec=/bin/probe", "--", "exit", "0",
		"---", img, "--name=three", "--exec=/bin/probe", "--", "wait-file", "/tmp/go", "+", "exit", "3",
		"---", img, "--name=long", "--exec=/bin/probe", "--", "sleep", "1h")
	pid := p.waitPid(t)
	statusDir := filepath.Join(p.Dir, "overlay", readFile(t, filepath.Join(p.Dir, "stage1TreeStoreID")), "upper/rkt/status")
	waitFor(t, 10*time.Second, "app ok's status", func() bool {
		_, err := os.Stat(filepath.Join(statusDir, "ok"))
		return err == nil
	})
	created, started := mtime(t, filepath.Join(p.Dir, layout.PodCreated)), mtime(t, filepath.Join(p.Dir, layout.Pid))

	// Running: rkt prints no app- lines yet.
	out, errOut, code := pod1(t, data, "status", p.UUID[:8])
	want := strings.Join([]string{"state=running", "created=" + created.Format(rktTimeLayout),
		"started=" + started.Format(rktTimeLayout), "networks=", "pid=" + strconv.Itoa(pid), "exited=false", ""}, "\n")
	if code != 0 || out != want {
		t.Fatalf("status (running): %d\n%s\nwant\n%s\n%s", code, out, want, errOut)
	}
	out, _, _ = pod1(t, data, "status", "--format=json", p.UUID)
	var s statusJSON
	jsonOf(t, out, &s)
	if s.Name != p.UUID || s.State != "running" || strings.Join(s.AppNames, ",") != "ok,three,long" ||
		*s.CreatedAt != created.Unix() || *s.StartedAt != started.Unix() || len(s.Apps) != 3 {
		t.Fatalf("status json (running): %s", out)
	}
	ok, three := s.Apps[0], s.Apps[1]
	if ok.State != "exited" || ok.ExitCode == nil || *ok.ExitCode != 0 || !strings.HasPrefix(ok.ImageID, "sha512-") ||
		*ok.CreatedAt != created.UnixNano() || *ok.StartedAt != started.UnixNano() || ok.FinishedAt != nil {
		t.Errorf("app ok (running pod): %+v", ok)
	}
	if three.State != "running" || three.ExitCode != nil || three.Record == nil || three.Record.State != "running" || three.Record.Pid <= 0 {
		t.Errorf("app three (running pod): %+v %+v", three, three.Record)
	}

	// list: the pod's columns on its first app's line only.
	out, _, code = pod1(t, data, "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "UUID APP IMAGE NAME STATE CREATED STARTED NETWORKS" {
		t.Fatalf("list: %q", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 4 || f[0] != p.UUID[:8] || f[1] != "ok" || f[2] != "pod1.dev/probe" || f[3] != "running" {
		t.Errorf("list pod line: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) != 2 || f[0] != "three" || f[1] != "pod1.dev/probe" {
		t.Errorf("list app line: %q", lines[2])
	}
	out, _, _ = pod1(t, data, "list", "--no-legend", "--full")
	if f := strings.Fields(strings.Split(out, "\n")[0]); len(f) < 6 || f[0] != p.UUID || len(f[3]) != 19 || f[4] != "running" ||
		f[5] != created.Format("2006-01-02") {
		t.Errorf("list --full: %q", out)
	}

	// Let app three fail: it stops the pod, long gets SIGTERM. Its status
	// file says 0, as rkt's stage1 records a sibling the pod stopped
	// (rkt's TestExitCodeWithSeveralApps); its record says how it ended.
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.AppRootfs("three"), "tmp/go"), nil, 0o644))
	if c := p.wait(t); c != 3 {
		t.Fatalf("pod exited %d, want 3: %s", c, p.Stderr)
	}
	out, _, _ = pod1(t, data, "status", p.UUID)
	want = strings.Join([]string{"state=exited", "created=" + created.Format(rktTimeLayout),
		"started=" + started.Format(rktTimeLayout), "networks=", "pid=" + strconv.Itoa(pid), "exited=true",
		"app-ok=0", "app-three=3", "app-long=0", ""}, "\n")
	if out != want {
		t.Fatalf("status (exited):\n%s\nwant\n%s", out, want)
	}
	out, _, _ = pod1(t, data, "status", "--format=json-pretty", p.UUID)
	s = statusJSON{}
	jsonOf(t, out, &s)
	for i, want := range [][2]int32{{0, 0}, {3, 3}, {0, 143}} {
		a := s.Apps[i]
		if a.State != "exited" || a.ExitCode == nil || *a.ExitCode != want[0] || a.Record == nil || a.Record.State != "exited" ||
			a.Record.ExitCode == nil || int32(*a.Record.ExitCode) != want[1] || a.Record.FinishedAt == nil ||
			a.Record.StoppedByPod != (i == 2) {
			t.Errorf("app %s (exited pod): %+v %+v", a.Name, a, a.Record)
		}
	}
	if s.State != "exited" || s.Apps[2].Record.Signal != "SIGTERM" {
		t.Errorf("exited pod json: %s", out)
	}
	// list --format=json is the list of status objects.
	out, _, _ = pod1(t, data, "list", "--format=json")
	var all []statusJSON
	jsonOf(t, out, &all)
	if len(all) != 1 || all[0].Name != p.UUID || all[0].State != "exited" || *all[0].Apps[1].ExitCode != 3 {
		t.Errorf("list json: %s", out)
	}
}

// --wait returns when the pod is over, --wait-ready when it can take app
// operations; with a duration they give up with 254.
func TestHostsideStatusWait(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	// The app ends when the test says so: a --wait that gave up at its
	// deadline is told apart from one that waited for the pod's end by
	// the pod still running, not by the time it took.
	p := runBG(t, data, img, "--exec=/bin/probe", "--", "wait-file", "/tmp/go", "+", "exit", "4")
	if out, _, code := pod1(t, data, "status", "--wait-ready=10s", p.UUID); code != 0 || !strings.HasPrefix(out, "state=running\n") {
		t.Fatalf("wait-ready: %d %q", code, out)
	}
	t0 := time.Now()
	if _, errOut, code := pod1(t, data, "status", "--wait=50ms", p.UUID); code != 254 || !strings.Contains(errOut, "deadline") {
		t.Fatalf("wait with a short timeout: %d %q after %v", code, errOut, time.Since(t0))
	}
	t.Logf("--wait=50ms gave up after %v", time.Since(t0))
	if out, _, code := pod1(t, data, "status", p.UUID); code != 0 || !strings.HasPrefix(out, "state=running\n") {
		t.Fatalf("after --wait=50ms: %d %q", code, out)
	}
	must(t, os.WriteFile(filepath.Join(data, "pods/run", p.UUID, layout.AppRootfs("probe"), "tmp/go"), nil, 0o644))
	out, _, code := pod1(t, data, "status", "--wait", p.UUID)
	if code != 0 || !strings.Contains(out, "state=exited\n") || !strings.HasSuffix(out, "app-probe=4\n") {
		t.Fatalf("wait: %d %q", code, out)
	}
	p.wait(t)
	// The pod was ready once and its stage1 leaves the link: an exited
	// pod reads as ready, as with rkt.
	if _, errOut, code := pod1(t, data, "status", "--wait-ready=5s", p.UUID); code != 0 {
		t.Fatalf("wait-ready on an exited pod: %d %q", code, errOut)
	}
}

// Every state directory and lock condition, through the CLI: the state=
// line, and which pods list shows (rkt: not embryos, not garbage).
func TestHostsideStatesEveryDir(t *testing.T) {
	data := t.TempDir()
	type c struct {
		dir    string
		locked bool
		want   string
	}
	cases := []c{
		{"embryo", false, "embryo"}, {"prepare", true, "preparing"}, {"prepare", false, "aborted prepare"},
		{"prepared", false, "prepared"}, {"run", true, "running"}, {"run", false, "exited"},
		{"exited-garbage", true, "exited deleting"}, {"exited-garbage", false, "exited garbage"},
		{"garbage", true, "deleting"}, {"garbage", false, "garbage"},
	}
	uuids := map[string]c{}
	for _, cs := range cases {
		u := fakePod(t, data, cs.dir, map[string]int{"a": 5}, cs.dir != "prepare" && cs.dir != "prepared" && cs.dir != "embryo")
		if cs.locked {
			holdLock(t, filepath.Join(data, "pods", cs.dir, u))
		}
		uuids[u] = cs
		out, errOut, code := pod1(t, data, "status", u)
		if cs.dir == "embryo" || cs.dir == "garbage" {
			// rkt resolves UUIDs among prepare, prepared, run and
			// exited-garbage only.
			if code != 254 {
				t.Errorf("%s: status found a pod rkt would not: %q", cs.dir, out)
			}
			continue
		}
		if code != 0 || !strings.HasPrefix(out, "state="+cs.want+"\n") {
			t.Errorf("%s locked=%v: %d %q %q", cs.dir, cs.locked, code, out, errOut)
		}
		wantApp := cs.want == "exited" || cs.want == "exited garbage" || cs.want == "exited deleting"
		if strings.Contains(out, "app-a=5\n") != wantApp {
			t.Errorf("%s locked=%v: app line: %q", cs.dir, cs.locked, out)
		}
	}
	out, _, _ := pod1(t, data, "list", "--no-legend", "--full")
	seen := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		cs, ok := uuids[f[0]]
		if !ok || cs.dir == "embryo" || cs.dir == "garbage" {
			t.Errorf("list shows %q", l)
			continue
		}
		seen++
		// UUID, APP, IMAGE NAME, IMAGE ID, STATE, then times that a
		// pod not yet prepared does not have.
		if cols := strings.Split(l, "\t"); len(cols) < 5 || cols[4] != cs.want {
			t.Errorf("list line %q, want state %q", l, cs.want)
		}
	}
	if seen != 7 {
		t.Errorf("list shows %d pods, want 7:\n%s", seen, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return strings.TrimSpace(string(b))
}
