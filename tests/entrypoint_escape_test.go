package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostScript writes a shell script on the host that leaves a marker when
// it runs, and returns both paths: what an entry point that escapes the
// stage1 rootfs would run as root.
func hostScript(t *testing.T) (script, marker string) {
	t.Helper()
	dir := t.TempDir()
	script, marker = filepath.Join(dir, "escaped.sh"), filepath.Join(dir, "ran")
	must(t, os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\nexit 0\n"), 0o755))
	return script, marker
}

// A stage1 whose run entry point is a symlink leading out of its rootfs
// (to a host file) is refused by pod1 run before anything of the pod
// exists: the entry point is resolved inside the stage1 rootfs, and a
// host binary is never executed as the pod's stage1. pod1 run used to
// follow the symlink and run the host's file.
func TestRunEntrypointEscapingTheStage1IsRefused(t *testing.T) {
	script, marker := hostScript(t)
	s1 := filepath.Join(t.TempDir(), "stage1")
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(filepath.Dir(stage1ACI(t)), "stage1"), s1).CombinedOutput(); err != nil {
		t.Fatalf("copy the stage1: %v: %s", err, out)
	}
	run := filepath.Join(s1, "rootfs/run")
	must(t, os.Remove(run))
	must(t, os.Symlink(script, run))

	data := dataDir(t)
	_, errOut, code := pod1(t, data, "run", "--net=none", "--stage1-path="+s1, probeACIDir(t), "--exec=/bin/probe", "--", "true")
	line := strings.TrimSuffix(errOut, "\n")
	if code != 254 || strings.Contains(line, "\n") || !strings.Contains(line, "run") {
		t.Errorf("pod1 run with an escaping run entry point: exit %d, stderr %q; want 254 and one line naming it", code, errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("pod1 run executed the host file the stage1's run entry point leads to")
	}
	for _, d := range []string{"pods/run", "pods/prepare", "pods/embryo"} {
		if ents, _ := os.ReadDir(filepath.Join(data, d)); len(ents) != 0 {
			t.Errorf("left in %s: %v", d, ents)
		}
	}
}

// The same for the app entry points of a running mutable pod, which pod1
// app used to run by a fixed name without resolving it in the stage1
// rootfs: an app-start leading to a host file is refused, not executed.
func TestAppEntrypointEscapingTheStage1IsRefused(t *testing.T) {
	script, marker := hostScript(t)
	data, uuid := cliSandbox(t)
	podDir := filepath.Join(data, "pods/run", uuid)
	if code, out := pod1cli(t, nil, "--dir="+data, "app", "add", uuid, probeACIDir(t), "--name=a", "--exec=/bin/probe", "--", "sleep", "1h"); code != 0 {
		t.Fatalf("app add: %d %s", code, out)
	}
	ep := filepath.Join(podDir, "stage1/rootfs/app-start")
	must(t, os.Remove(ep))
	must(t, os.Symlink(script, ep))
	code, out := pod1cli(t, nil, "--dir="+data, "app", "start", uuid, "--app=a")
	if code == 0 || !strings.Contains(out, "app-start") {
		t.Errorf("app start through an escaping entry point: exit %d, want a refusal naming it: %s", code, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("pod1 app start executed the host file the stage1's app-start leads to")
	}
}
