package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// pod1 stop reports each pod it could not stop in one line of its own:
// no summary line after them, and a stop entrypoint's own error is folded
// into the pod's line rather than printed beside it.
func TestPod1StopOneLinePerFailure(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	p := runBG(t, data, img, "--name=a", "--exec=/bin/probe", "--", "sleep", "1h")
	p.waitPid(t)
	prepared := fakePod(t, data, "prepared", map[string]int{"a": -1}, false)
	missing := newUUID(t)

	_, errOut, code := pod1(t, data, "stop", missing)
	if lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"); code != 254 || len(lines) != 1 || !strings.Contains(lines[0], missing) {
		t.Errorf("stop of an unknown pod: %d %q, want one line naming it", code, errOut)
	}
	_, errOut, code = pod1(t, data, "stop", prepared, missing)
	if lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"); code != 254 || len(lines) != 2 ||
		!strings.Contains(lines[0], prepared) || !strings.Contains(lines[1], missing) {
		t.Errorf("stop of two pods that fail: %d %q, want one line for each", code, errOut)
	}

	// The stop entrypoint fails (its pid file is a FIFO, which it refuses).
	pidFile := filepath.Join(p.Dir, layout.Pid)
	b, err := os.ReadFile(pidFile)
	must(t, err)
	must(t, os.Remove(pidFile))
	must(t, unix.Mkfifo(pidFile, 0o644))
	_, errOut, code = pod1(t, data, "stop", p.UUID)
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if code != 254 || len(lines) != 1 || !strings.Contains(lines[0], p.UUID) || !strings.Contains(lines[0], "pid: not a regular file") {
		t.Errorf("stop whose entrypoint fails: %d %q, want one line naming the pod and the entrypoint's reason", code, errOut)
	}
	must(t, os.Remove(pidFile))
	must(t, os.WriteFile(pidFile, b, 0o644))
	if out, errOut, code := pod1(t, data, "stop", p.UUID); code != 0 || out != fmt.Sprintf("%q\n", p.UUID) {
		t.Fatalf("stop: %d %q %q", code, out, errOut)
	}
	p.wait(t)
}
