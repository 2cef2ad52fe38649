package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An image's eventHandlers run as rkt's stage1 runs them: pre-start before
// the app, in the app's root with its environment, as root; the app runs
// only if it succeeds (else the run ends with its code); post-stop after
// the app has exited, the app's code kept as the pod's.
func TestRktEventHandlers(t *testing.T) {
	r := newRkt(t)
	vol := filepath.Join(r.dir, "vol")
	must(t, os.Mkdir(vol, 0o777))
	handlers := func(pre []string) []map[string]any {
		return []map[string]any{
			{"name": "pre-start", "exec": pre},
			{"name": "post-stop", "exec": []string{"/bin/probe", "write", "/vol/post-stop", "ran", "+", "cat", "/tmp/by-pre-start"}},
		}
	}
	app := func(pre []string) map[string]any {
		return map[string]any{
			"exec": []string{"/bin/probe", "cat", "/tmp/by-pre-start", "+", "ids", "+", "exit", "5"},
			"user": "1000", "group": "1000",
			"environment":   []map[string]string{{"name": "WHO", "value": "app-env"}},
			"eventHandlers": handlers(pre),
			"mountPoints":   []map[string]any{{"name": "vol", "path": "/vol"}},
		}
	}
	ok := r.aci("handlers", app([]string{"/bin/probe", "ids", "+", "env", "+", "write", "/tmp/by-pre-start", "pre"}), nil)
	out, errOut, code := r.run("--volume=vol,kind=host,source="+vol, ok)
	if code != 5 {
		t.Fatalf("exit %d, want the app's 5\n%s%s", code, out, errOut)
	}
	ids := lines(out, "ids ")
	if len(ids) != 2 || !strings.HasPrefix(ids[0], "ids uid=0 gid=0") || !strings.HasPrefix(ids[1], "ids uid=1000 gid=1000") {
		t.Fatalf("want the pre-start as root, then the app as 1000: %q\n%s%s", ids, out, errOut)
	}
	if !hasLine(out, `^env "WHO=app-env"$`) {
		t.Errorf("the pre-start handler lacks the app's environment\n%s", out)
	}
	if c := lines(out, "cat "); len(c) != 2 || c[0] != "cat pre" || c[1] != "cat pre" {
		t.Errorf("the app and post-stop must see the pre-start's file in the app's root: %q", c)
	}
	if i, j := strings.Index(out, "ids uid=1000"), strings.LastIndex(out, "cat pre"); i < 0 || j < i {
		t.Errorf("post-stop must run after the app\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, "post-stop")); string(b) != "ran" {
		t.Errorf("post-stop did not run: %q", b)
	}
	must(t, os.Remove(filepath.Join(vol, "post-stop")))

	bad := r.aci("badpre", app([]string{"/bin/probe", "exit", "3"}), nil)
	out, errOut, code = r.run("--volume=vol,kind=host,source="+vol, bad)
	if code != 3 || hasLine(out, "^ids uid=1000") {
		t.Fatalf("failed pre-start: exit %d, want 3 and the app not run\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "pre-start handler failed with 3") {
		t.Errorf("no word of the failed pre-start: %s", errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, "post-stop")); string(b) != "ran" {
		t.Errorf("post-stop did not run after a failed pre-start: %q", b)
	}
}
