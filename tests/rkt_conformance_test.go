package tests

// What rkt's own functional tests check and pod1 follows, through the real
// rkt: issue 35's decisions (docs/conformance.md).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pod1/pod1/status"
)

// An app the pod stopped because another app failed records 0 in the
// status file rkt reads, as rkt's stage1 records it (rkt's
// TestExitCodeWithSeveralApps); pod1's JSON record keeps how it ended (the
// pod's SIGTERM) and that the pod stopped it. The pod's code is the
// failed app's.
func TestRktSiblingStoppedAfterAFailureRecordsZero(t *testing.T) {
	r := newRkt(t)
	ok := r.aci("ok", map[string]any{"exec": []string{"/bin/probe", "exit", "0"}}, nil)
	failing := r.aci("failing", map[string]any{"exec": []string{"/bin/probe", "sleep", "300ms", "+", "exit", "5"}}, nil)
	long := r.aci("long", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	uf := filepath.Join(r.dir, "uuid")
	out, errOut, code := r.run("--uuid-file-save="+uf, ok, failing, long)
	if code != 5 {
		t.Fatalf("rkt run: exit %d, want 5\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	b, err := os.ReadFile(uf)
	must(t, err)
	uuid := strings.TrimSpace(string(b))
	s := r.status(uuid)
	for app, want := range map[string]int{"ok": 0, "failing": 5, "long": 0} {
		if got := s.appExit(app); got != want {
			t.Errorf("rkt status: app %s exit %d, want %d (%+v)", app, got, want, s)
		}
	}
	if txt := r.rkt("status", uuid); !hasLine(txt, "^app-long=0$") || !hasLine(txt, "^app-failing=5$") {
		t.Errorf("rkt status (text):\n%s", txt)
	}
	dir := filepath.Join(r.data, "pods/exited-garbage", uuid, "stage1/rootfs/rkt/status")
	if _, err := os.Stat(dir); err != nil {
		dir = filepath.Join(r.data, "pods/run", uuid, "stage1/rootfs/rkt/status")
	}
	rec, err := status.ReadRecord(dir, "long")
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(rec)
	if rec.ExitCode == nil || *rec.ExitCode != 143 || rec.Signal != "SIGTERM" || !rec.StoppedByPod || rec.StatusCode == nil || *rec.StatusCode != 0 {
		t.Errorf("long's record: %s, want exit code 143 by SIGTERM, stopped by the pod, status 0", j)
	}
	for _, app := range []string{"ok", "failing"} {
		rec, err := status.ReadRecord(dir, app)
		if err != nil || rec.StoppedByPod || rec.StatusCode != nil {
			t.Errorf("%s's record: %+v, %v: not stopped by the pod", app, rec, err)
		}
	}
}

// A mount target reached through the image's symlinks, dangling ones
// included, makes its directories where the link points, resolved inside
// the app's root (rkt's TestMountSymlink): an absolute link to a path the
// image lacks, a relative one, and one climbing past the root with "..",
// which must land inside it.
func TestRktMountTargetThroughSymlinks(t *testing.T) {
	r := newRkt(t)
	src := filepath.Join(r.dir, "hello")
	must(t, os.WriteFile(src, []byte("world"), 0o644))
	escape := "pod1-escape-" + filepath.Base(r.dir)
	img := r.aci("mntlink", nil, map[string]aciFile{
		"dir1":                   {Mode: 0o40755},
		"dir2":                   {Mode: 0o40755},
		"dir1/link_abs_dir2":     {Mode: 0o777, Link: "/dir2"},
		"dir1/link_rel_dir2":     {Mode: 0o777, Link: "../dir2"},
		"dir1/link_abs_notexist": {Mode: 0o777, Link: "/notexists"},
		"dir1/link_up":           {Mode: 0o777, Link: "../../../../../../.."},
	})
	for target, seen := range map[string]string{
		"/dir1/link_abs_dir2/newdir/foo":            "/dir2/newdir/foo",
		"/dir1/link_rel_dir2/bar":                   "/dir2/bar",
		"/dir1/link_abs_notexist/newdir1/newdir2/f": "/notexists/newdir1/newdir2/f",
		"/dir1/link_up/" + escape + "/foo":          "/" + escape + "/foo",
		"../../../../../../../" + escape + "2/foo":  "/" + escape + "2/foo",
	} {
		out, errOut, code := r.run("--volume=v,kind=host,source="+src, img,
			"--mount=volume=v,target="+target, "--exec=/bin/probe", "--", "cat", seen)
		if code != 0 || !hasLine(out, "^cat world$") {
			t.Errorf("target %s: exit %d, want %s to hold the volume\n%s%s", target, code, seen, out, errOut)
		}
	}
	for _, p := range []string{"/" + escape, "/" + escape + "2", filepath.Join(filepath.Dir(r.dir), escape)} {
		if _, err := os.Lstat(p); err == nil {
			_ = os.RemoveAll(p)
			t.Errorf("made outside the app's root: %s", p)
		}
	}
}
