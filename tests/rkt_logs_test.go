package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Through the real rkt: an app reads nothing of what rkt run was given on
// stdin, unless the pod is --interactive.
func TestRktStdinInteractive(t *testing.T) {
	r := newRkt(t)
	img := r.aci("reader", map[string]any{"exec": []string{"/bin/probe", "read-stdin"}}, nil)
	out, errOut, code := r.exec(rktTimeout, []byte("secret\n"), r.runArgs("run", []string{img})...)
	if code != 0 || !hasLine(out, `^stdin ""$`) {
		t.Errorf("rkt run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = r.exec(rktTimeout, []byte("typed\n"), r.runArgs("run", []string{"--interactive", img})...)
	if code != 0 || !hasLine(out, `^stdin "typed\\n"$`) {
		t.Errorf("rkt run --interactive: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// rkt's app API in its CRI log mode (rktlet's): the sandbox names the log
// directory, app add the app's file and stream modes; the app's lines
// land there in the CRI format rkt's own stage1 writes (rkt's
// TestAppSandboxCRILogs).
func TestRktAppSandboxCRILogs(t *testing.T) {
	r := newRkt(t)
	// rkt app add takes --stdin/--stdout/--stderr with attach enabled.
	r.env = append(r.env, "RKT_EXPERIMENT_ATTACH=true")
	logDir := filepath.Join(r.dir, "cri-logs")
	must(t, os.Mkdir(logDir, 0o755))
	img := r.aci("hello", map[string]any{"exec": []string{"/bin/probe", "out", "1", "1", "HelloFromAppInSandbox", "+", "out", "2", "1", "oops"}}, nil)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none",
		"--annotation=coreos.com/rkt/experiment/logmode=k8s-plain",
		"--annotation=coreos.com/rkt/experiment/kubernetes-log-dir="+logDir)
	r.rkt("fetch", img)
	r.rkt("app", "add", p.UUID, "pod1.test/hello", "--name=hello", "--stdin=stream", "--stdout=stream", "--stderr=stream",
		"--annotation=coreos.com/rkt/experiment/kubernetes-log-path=hello_0.log")
	r.rkt("app", "start", p.UUID, "--app=hello")
	var content string
	waitFor(t, 20*time.Second, "the CRI log file", func() bool {
		b, _ := os.ReadFile(filepath.Join(logDir, "hello_0.log"))
		content = string(b)
		return strings.Count(content, "\n") == 2
	})
	if !hasLine(content, `^\S+Z stdout HelloFromAppInSandbox 0$`) || !hasLine(content, `^\S+Z stderr oops 0$`) {
		t.Errorf("CRI log file: %q", content)
	}
	r.rkt("stop", p.UUID)
	p.wait(t)
}
