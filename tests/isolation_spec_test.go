package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pod1/pod1/layout"
)

// Issue 33 item 2, issue 34 item 8: enter takes the app's isolation from
// what only stage0 and the run entry point wrote (the pod manifest, the
// image manifest, the run's options), never from the spec PID 1 saved,
// which an app that ever reached PID 1's files could rewrite. Here the
// saved spec is rewritten, as such an app would, to ask for every
// capability, the stage1's bounding set, no filter, no no_new_privs and
// root; then rkt enter and pod1 enter still run the command with the
// app's bounding set, filter and no_new_privs. They run it as root (rkt's
// enter did), holding what a root process of the app holds; pod1 enter
// --user runs it as the app's user. Before, enter honoured every field
// of the saved spec, and ran the command as the app's user.
func TestEnterTakesItsIsolationFromTheManifest(t *testing.T) {
	r := newRkt(t)
	caps := []string{"CAP_CHOWN", "CAP_NET_BIND_SERVICE"}
	aci := r.aci("spec", map[string]any{
		"exec": []string{"/bin/probe", "sleep", "1h"}, "user": "1000", "group": "1000", "supplementaryGIDs": []int{50},
		"isolators": []map[string]any{
			isolator("os/linux/capabilities-retain-set", map[string]any{"set": caps}),
			isolator("os/linux/no-new-privileges", true),
			seccompSet("remove", "ENOTSUP", "@rkt/default-blacklist", "sysinfo"),
		},
	}, nil)
	p := r.start("run", aci)
	r.appPid(p.UUID, "spec")
	spec := filepath.Join(r.data, "pods/run", p.UUID, layout.AppSpec("spec"))
	b, err := os.ReadFile(spec)
	must(t, err)
	var m map[string]any
	must(t, json.Unmarshal(b, &m))
	m["uid"], m["gid"] = 0, 0
	m["isolation"] = map[string]any{"capabilities": allCapabilities(), "unrestrictedCapabilities": true}
	b, err = json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(spec, b, 0o644))

	check := []string{"/bin/probe", "ids", "+", "status", "+", "syscall", "sysinfo"}
	mask := capMask(t, caps...)
	root := []string{"ids uid=0 gid=0 groups=[]", "status CapBnd: " + mask, "status CapEff: " + mask,
		"status NoNewPrivs: 1", "status Seccomp: 2", "syscall sysinfo ENOTSUP"}
	user := []string{"ids uid=1000 gid=1000 groups=[50]", "status CapBnd: " + mask, "status CapEff: 0000000000000000",
		"status NoNewPrivs: 1", "status Seccomp: 2", "syscall sysinfo ENOTSUP"}
	for _, c := range []struct {
		name string
		run  func() (string, string, int)
		want []string
	}{
		{"rkt enter", func() (string, string, int) {
			return r.exec(rktTimeout, nil, append([]string{"enter", "--app=spec", p.UUID}, check...)...)
		}, root},
		{"pod1 enter", func() (string, string, int) {
			return pod1(t, r.data, append([]string{"enter", "--app=spec", p.UUID}, check...)...)
		}, root},
		{"pod1 enter --user", func() (string, string, int) {
			return pod1(t, r.data, append([]string{"enter", "--app=spec", "--user", p.UUID}, check...)...)
		}, user},
	} {
		out, errOut, code := c.run()
		if code != 0 {
			t.Errorf("%s: exit %d: %s", c.name, code, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("%s: missing %q in:\n%s", c.name, w, out)
			}
		}
	}
}
