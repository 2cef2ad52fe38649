package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pod1/pod1/layout"
)

// A cloned pod's cgroups.json names the clone's own cgroups, in both the
// forms the pod's cgroup paths take (the stage1 gc refuses any other).
func TestRenameCgroups(t *testing.T) {
	const (
		old = "ba213c6f-3f69-4e3d-95ba-59d974027daa"
		new = "fff4cad8-9c08-4762-900d-8d50906f4f93"
	)
	esc := func(u string) string { return strings.ReplaceAll(u, "-", `\\x2d`) }
	tmpl, dst := t.TempDir(), t.TempDir()
	body := `{"v2":"/sys/fs/cgroup/unified/x/machine-rkt` + esc(old) + `.scope","v1":{"memory":"/sys/fs/cgroup/memory/pod1-` + old + `"}}`
	for _, d := range []string{tmpl, dst} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(d, layout.CgroupsFile)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, layout.CgroupsFile), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := renameCgroups(tmpl, dst, new); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst, layout.CgroupsFile))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v2":"/sys/fs/cgroup/unified/x/machine-rkt` + esc(new) + `.scope","v1":{"memory":"/sys/fs/cgroup/memory/pod1-` + new + `"}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}
