package tests

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// A pod whose cgroups an older stage1 named (pod1-<uuid>) is collected by
// rkt gc with this stage1's gc, which removes them: a host updated while
// such pods ran, or waited for gc, is left with nothing. The older
// stage1's leftovers are made beside those of a pod of this one (cgroup
// v2 renames no cgroup), which the test removes, and its cgroups.json is
// rewritten to name them, as that stage1 wrote it.
func TestRktGCRemovesAnOlderStage1sCgroups(t *testing.T) {
	r := newRkt(t)
	img := r.aci("srv", map[string]any{"exec": []string{"/bin/probe", "term-exit", "0", "+", "sleep", "1h"}}, nil)
	p := r.start("run", img)
	r.rkt("stop", p.UUID)
	if code := p.wait(t); code != 0 {
		t.Fatalf("rkt run after rkt stop: exit %d\n%s", code, p.errb)
	}
	file := filepath.Join(r.data, "pods/run", p.UUID, layout.CgroupsFile)
	b, err := os.ReadFile(file)
	must(t, err)
	var g cgroups.Group
	must(t, json.Unmarshal(b, &g))
	must(t, g.RemoveTree())
	var legacy []string
	older := func(d string) string {
		if filepath.Base(d) != cgroups.PodName(p.UUID) {
			t.Fatalf("the pod's cgroup %s is not named %s", d, cgroups.PodName(p.UUID))
		}
		old := filepath.Join(filepath.Dir(d), cgroups.LegacyPodName(p.UUID))
		must(t, os.MkdirAll(filepath.Join(old, cgroups.AppsName, "app-srv"), 0o755))
		legacy = append(legacy, old)
		return old
	}
	t.Cleanup(func() {
		for _, d := range legacy {
			_ = (&cgroups.Group{V2: d}).RemoveTree()
		}
	})
	if g.V2 != "" {
		g.V2 = older(g.V2)
	}
	for c, d := range g.V1 {
		g.V1[c] = older(d)
	}
	b, err = json.Marshal(&g)
	must(t, err)
	must(t, os.WriteFile(file, b, 0o644))

	r.rkt("gc", "--grace-period=0s")
	for _, d := range legacy {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("rkt gc left the older stage1's cgroup %s (%v)", d, err)
		}
	}
	if left, _ := cgroups.Find(func(n string) bool { return cgroups.PodUUID(n) == p.UUID }); len(left) != 0 {
		t.Errorf("cgroups of the pod left: %v", left)
	}
}
