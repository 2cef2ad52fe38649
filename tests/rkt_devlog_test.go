package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Through the real rkt with --private-users: the app opens its stdout and
// stderr again by path, as nginx's logs linked to /dev/stdout do, and
// what it writes there and sends to /dev/log reaches the console and the
// pod's logs.
func TestRktPrivateUsersReopenStdioAndDevLog(t *testing.T) {
	r := newRkt(t)
	img := r.aci("nginxlike", map[string]any{"exec": []string{"/bin/probe", "reopen", "/dev/stdout", "/proc/self/fd/1", "/dev/stderr",
		"+", "syslog", "/dev/log", "1", "rkt-hello"}}, nil)
	uf := filepath.Join(r.dir, "uuid-reopen")
	out, errOut, code := r.run("--private-users", "--no-overlay", "--uuid-file-save="+uf, img)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, re := range []string{`^reopen /dev/stdout ok$`, `^via /dev/stdout$`, `^reopen /proc/self/fd/1 ok$`, `^via /proc/self/fd/1$`,
		`^reopen /dev/stderr ok$`, `^syslog /dev/log sent 1 ok$`} {
		if !hasLine(out, re) {
			t.Errorf("stdout lacks %s:\n%s", re, out)
		}
	}
	if !hasLine(errOut, `via /dev/stderr$`) {
		t.Errorf("stderr lacks the line written through /dev/stderr:\n%s", errOut)
	}
	b, err := os.ReadFile(uf)
	must(t, err)
	logs, e, code := pod1(t, r.data, "logs", strings.TrimSpace(string(b)))
	if code != 0 || !strings.Contains(logs, "rkt-hello 0\n") {
		t.Errorf("pod1 logs: %d %s\n%s", code, e, logs)
	}
}

// An app rkt adds to a running pod gets its /dev/log too; one added again
// under a removed app's name gets a new one, and its messages come under
// its name.
func TestRktAppAddGetsDevLog(t *testing.T) {
	r := newRkt(t)
	img := r.aci("logger", map[string]any{"exec": []string{"/bin/probe", "syslog", "/dev/log", "1", "added", "+", "sleep", "1h"}}, nil)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	r.rkt("fetch", img)
	logs := func(want string) {
		t.Helper()
		var out string
		waitFor(t, 20*time.Second, want+" in pod1 logs", func() bool {
			out, _, _ = pod1(t, r.data, "logs", "--app=lg", p.UUID)
			return strings.Contains(out, want+"\n")
		})
	}
	r.rkt("app", "add", p.UUID, "pod1.test/logger", "--name=lg")
	r.rkt("app", "start", p.UUID, "--app=lg")
	logs("added 0")
	r.rkt("app", "rm", p.UUID, "--app=lg")
	r.rkt("app", "add", p.UUID, "pod1.test/logger", "--name=lg")
	r.rkt("app", "start", p.UUID, "--app=lg")
	waitFor(t, 20*time.Second, "a second message", func() bool {
		out, _, _ := pod1(t, r.data, "logs", "--app=lg", p.UUID)
		return strings.Count(out, "added 0\n") == 2
	})
	r.rkt("stop", p.UUID)
	p.wait(t)
}
