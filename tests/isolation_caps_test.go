package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// T-CAP-1 (CVE-2022-29162): every app's sets, read by the app itself from
// /proc/self/status: the bounding set is rkt's default, or the retain-set,
// or the default minus the remove-set; a root app's permitted and
// effective sets equal it, any other app's are empty; inheritable and
// ambient are always empty. --disable-capabilities-restriction is the
// negative control: the same root app then holds every capability.
func TestCapabilitySets(t *testing.T) {
	retain := isolator("os/linux/capabilities-retain-set", map[string]any{"set": []string{"CAP_NET_BIND_SERVICE"}})
	remove := isolator("os/linux/capabilities-remove-set", map[string]any{"set": []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_RAW"}})
	withoutRemoved := slices.DeleteFunc(slices.Clone(rktDefaultCaps), func(c string) bool {
		return c == "CAP_CHOWN" || c == "CAP_KILL" || c == "CAP_NET_RAW"
	})
	def := capMask(t, rktDefaultCaps...)
	cases := []struct {
		name     string
		user     string
		isos     []map[string]any
		args     []string
		bnd, eff string
	}{
		{"root-default", "0", nil, nil, def, def},
		{"user-default", "1000", nil, nil, def, "0000000000000000"},
		{"root-retain", "0", []map[string]any{retain}, nil, capMask(t, "CAP_NET_BIND_SERVICE"), capMask(t, "CAP_NET_BIND_SERVICE")},
		{"user-retain", "1000", []map[string]any{retain}, nil, capMask(t, "CAP_NET_BIND_SERVICE"), "0000000000000000"},
		{"root-remove", "0", []map[string]any{remove}, nil, capMask(t, withoutRemoved...), capMask(t, withoutRemoved...)},
		{"root-unrestricted", "0", []map[string]any{retain}, []string{"--net=none", "--disable-capabilities-restriction"}, ownBoundingSet(t), ownBoundingSet(t)},
		{"user-unrestricted", "1000", nil, []string{"--net=none", "--disable-capabilities-restriction"}, ownBoundingSet(t), "0000000000000000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := isoPod(t, []App{{Name: "a", User: c.user, Group: c.user, Exec: probe("status")}}, Isolators{"a": c.isos}, nil)
			r := runPod(t, p, RunOpts{Args: c.args})
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			st := procStatus(t, r.Stdout.String())
			want := map[string]string{"CapBnd": c.bnd, "CapPrm": c.eff, "CapEff": c.eff, "CapInh": "0000000000000000", "CapAmb": "0000000000000000"}
			for k, v := range want {
				if st[k] != v {
					t.Errorf("%s %s, want %s", k, st[k], v)
				}
			}
		})
	}
}

// The sets are the app's own: a capability left out is really gone (chown
// to another user fails without CAP_CHOWN), and a restarted app gets the
// same sets as its first run.
func TestCapabilitiesAreEnforcedAndSurviveRestart(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	must(t, os.WriteFile(filepath.Join(vol, "f"), nil, 0o644))
	remove := isolator("os/linux/capabilities-remove-set", map[string]any{"set": []string{"CAP_CHOWN"}})
	apps := []App{
		{Name: "keeps", Exec: probe("chown", "/vol/f", "4242"), MPoints: mp},
		{Name: "lost", Exec: probe("chown", "/vol/f", "4343", "+", "status", "+", "append", "/vol/runs", "+", "exit", "1"), MPoints: mp,
			Annotations: map[string]string{"pod1/restart-policy": "on-failure", "pod1/restart-backoff": "10ms", "pod1/start-limit-burst": "2", "pod1/start-limit-interval": "1h"}},
	}
	p := isoPod(t, apps, Isolators{"lost": {remove}}, vols)
	r := runPod(t, p, RunOpts{})
	if got := r.Lines("chown "); !slices.Contains(got, "chown /vol/f ok") || !slices.Contains(got, "chown /vol/f EPERM") {
		t.Fatalf("chown results %q; stderr %s", got, r.Stderr)
	}
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(vol, "f"), &st))
	if st.Uid != 4242 {
		t.Errorf("owner %d: the app with CAP_CHOWN did not chown", st.Uid)
	}
	runs, _ := os.ReadFile(filepath.Join(vol, "runs"))
	if n := strings.Count(string(runs), "\n"); n != 2 {
		t.Fatalf("lost ran %d times, want 2", n)
	}
	bnd := r.Lines("status CapBnd")
	want := "status CapBnd: " + capMask(t, slices.DeleteFunc(slices.Clone(rktDefaultCaps), func(c string) bool { return c == "CAP_CHOWN" })...)
	if len(bnd) != 2 || bnd[0] != want || bnd[1] != want {
		t.Fatalf("bounding sets of the two runs %q, want %q", bnd, want)
	}
}

// no_new_privs is set by the isolator and only then (negative control).
func TestNoNewPrivileges(t *testing.T) {
	p := isoPodNamed(t, []App{{Name: "on", Exec: probe("status")}, {Name: "off", Exec: probe("status")}},
		Isolators{"on": {isolator("os/linux/no-new-privileges", true)}, "off": {isolator("os/linux/no-new-privileges", false)}}, nil)
	r := start(t, p, RunOpts{})
	r.Wait(t)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	got := appLines(r, "status NoNewPrivs")
	if !slices.Equal(got["on"], []string{"status NoNewPrivs: 1"}) || !slices.Equal(got["off"], []string{"status NoNewPrivs: 0"}) {
		t.Fatalf("NoNewPrivs by app %q, want on 1 and off 0\nstdout:\n%s", got, r.Stdout)
	}
}

// A root app given a capability that opens the host (CAP_SYS_PTRACE and
// the like) runs, but not silently (threats T-ROOT-2).
func TestEscapeCapabilitiesAreWarnedAbout(t *testing.T) {
	p := isoPod(t, []App{{Name: "a", Exec: probe("exit", "0")}, {Name: "b", User: "1000", Exec: probe("exit", "0")},
		{Name: "c", Exec: probe("exit", "0")}},
		Isolators{
			"a": {isolator("os/linux/capabilities-retain-set", map[string]any{"set": []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}})},
			"b": {isolator("os/linux/capabilities-retain-set", map[string]any{"set": []string{"CAP_SYS_ADMIN"}}), isolator("os/linux/no-new-privileges", true)},
			// No filter: ptrace reaches the pod's apps only, no stage1
			// process (TestStage1OutOfTheAppsReach).
			"c": {isolator("os/linux/capabilities-retain-set", map[string]any{"set": []string{"CAP_SYS_PTRACE", "CAP_CHOWN"}}),
				isolator("os/linux/seccomp-retain-set", map[string]any{"set": []string{"@appc.io/all"}})},
		}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr.String(), `] warning: app "a" has CAP_SYS_ADMIN`) {
		t.Errorf("no warning for CAP_SYS_ADMIN: %q", r.Stderr)
	}
	// A non-root app with no_new_privs cannot come by the capability.
	if strings.Contains(r.Stderr.String(), `app "b"`) || strings.Contains(r.Stderr.String(), `app "c"`) {
		t.Errorf("warning for a non-root app with no_new_privs, or for CAP_SYS_PTRACE: %q", r.Stderr)
	}
}

// An app added to a running mutable pod (rkt app add) is made by the same
// code as the pod's first apps: its isolators apply, and the defaults
// (seccomp, masked paths) too.
func TestAppAddedLaterGetsItsIsolation(t *testing.T) {
	p, r := sandbox(t, nil)
	a := App{Name: "late", Exec: probe("status", "+", "stat", "/proc/timer_list", "+", "sleep", "1h")}
	root := filepath.Join(p.Dir, layout.AppRootfs(a.Name))
	must(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	copyFile(t, bin("probe"), filepath.Join(root, "bin/probe"))
	must(t, os.WriteFile(filepath.Join(root, "..", "manifest"), imageManifest(a.Name), 0o644))
	var pm, cur map[string]any
	b, err := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, err)
	must(t, json.Unmarshal(b, &pm))
	must(t, json.Unmarshal(withIsolators(t, manifest([]App{a}, nil), Isolators{"late": {
		isolator("os/linux/capabilities-retain-set", map[string]any{"set": []string{"CAP_KILL"}}),
		isolator("os/linux/no-new-privileges", true),
	}}), &cur))
	apps, _ := pm["apps"].([]any)
	pm["apps"] = append(apps, cur["apps"].([]any)[0])
	b, _ = json.Marshal(pm)
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640))
	must(t, os.WriteFile(filepath.Join(p.statusDir(), a.Name+"-created"), nil, 0o644))
	if code, out := entry(t, p, "app-add", "--debug=false", "--uuid="+p.UUID, "--app="+a.Name); code != 0 {
		t.Fatalf("app add: %d %s", code, out)
	}
	if code, out := startApp(t, p, a.Name); code != 0 {
		t.Fatalf("app start: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "the app's report", func() bool { return strings.Contains(r.Stdout.String(), "stat /proc/timer_list") })
	st := procStatus(t, r.Stdout.String())
	want := map[string]string{"CapBnd": capMask(t, "CAP_KILL"), "CapEff": capMask(t, "CAP_KILL"), "CapInh": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2"}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("%s %s, want %s", k, st[k], v)
		}
	}
	if !strings.Contains(r.Stdout.String(), "stat /proc/timer_list mode=100000 ") {
		t.Errorf("not masked: %q", r.Lines("stat "))
	}
}
