package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A `rkt app add` that the stage1 refuses (a volume on /proc) leaves no
// trace: rkt's stage0 has already put the app in the pod manifest, written
// its -created marker, env file and rootfs when app/add runs, and all of
// it is undone, so the app is not listed and the name can be added again.
func TestRktRefusedAppAddLeavesNoTrace(t *testing.T) {
	r := newRkt(t)
	vol := filepath.Join(r.dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	img := r.aci("adder", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	r.rkt("fetch", img)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	// rkt shows the stage1's line with --debug only.
	_, errOut, code := r.exec(rktTimeout, nil, "--debug", "app", "add", p.UUID, "pod1.test/adder", "--name=bad",
		"--mnt-volume=name=test,kind=host,source="+vol+",target=/proc/sys")
	if code == 0 || !strings.Contains(errOut, "/proc/sys") {
		t.Fatalf("add with a volume on /proc/sys: exit %d, want a refusal naming the target: %s", code, errOut)
	}
	if out := r.rkt("app", "list", "--no-legend", p.UUID); strings.Contains(out, "bad") {
		t.Errorf("the refused app is listed: %q", out)
	}
	assertAppGone(t, r.data, p.UUID, "bad")
	assertNoAppEnv(t, filepath.Join(r.data, "pods/run", p.UUID), "bad")
	// The name is free, and an operation after the refusal adopts
	// nothing.
	r.rkt("app", "add", p.UUID, "pod1.test/adder", "--name=bad")
	r.rkt("app", "start", p.UUID, "--app=bad")
	r.appPid(p.UUID, "bad")
	r.rkt("stop", p.UUID)
	p.wait(t)
	if strings.Contains(p.errb.String(), "never reached the pod") {
		t.Errorf("the refused add was adopted later: %s", p.errb)
	}
}

// The same through pod1's own app add.
func TestPod1RefusedAppAddLeavesNoTrace(t *testing.T) {
	vol := t.TempDir()
	data, uuid := cliSandbox(t, "--volume=v,kind=host,source="+vol)
	img := probeACIDir(t)
	code, out := pod1cli(t, nil, "--dir="+data, "app", "add", uuid, img, "--name=bad",
		"--mount", "volume=v,target=/proc/sys", "--exec=/bin/probe", "--", "sleep", "1h")
	if code == 0 || !strings.Contains(out, "/proc/sys") {
		t.Fatalf("add with a volume on /proc/sys: exit %d, want a refusal naming the target: %s", code, out)
	}
	if code, out := pod1cli(t, nil, "--dir="+data, "app", "list", uuid); code != 0 || strings.Contains(out, "bad") {
		t.Errorf("list after a refused add: %d %q", code, out)
	}
	assertAppGone(t, data, uuid, "bad")
	assertNoAppEnv(t, filepath.Join(data, "pods/run", uuid), "bad")
	if code, out := pod1cli(t, nil, "--dir="+data, "app", "add", uuid, img, "--name=bad", "--exec=/bin/probe", "--", "sleep", "1h"); code != 0 {
		t.Fatalf("add again: %d %s", code, out)
	}
}

func assertNoAppEnv(t *testing.T, podDir, app string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(podDir, "stage1/rootfs/rkt/env", app)); err == nil {
		t.Errorf("app %s: env file left", app)
	}
}
