package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// PID 1 is born with the pod's bounding set, set up by run on the thread
// that clones it, and keeps its caller's permitted set through its exec by
// an inheritable set run gives that thread; PID 1 empties its inheritable
// set before it starts anything (stage1-init/podstart/pid1fork.go). Started from a
// caller whose inheritable set is not empty (setpriv), PID 1 has no
// inheritable capability, its caller's permitted set, and as bounding set
// its own needs plus the app's capabilities, or the caller's whole set
// when an app keeps every capability; the app has no inheritable
// capability either. Before, PID 1 kept its caller's inheritable set, and
// each process it started executed with it added to its permitted set.
func TestPID1CapabilitySetsFromAnInheritingCaller(t *testing.T) {
	caps := append(append([]string{}, rktDefaultCaps...), "CAP_NET_ADMIN")
	own := selfStatus(t)
	for _, tc := range []struct {
		name string
		args []string
		bnd  string
	}{
		{"restricted", nil, ""},
		{"unrestricted", []string{"--net=none", "--disable-capabilities-restriction"}, own["CapBnd"]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := isoPod(t, []App{{Name: "a", Exec: probe("status", "+", "sleep", "1h")}},
				Isolators{"a": {isolator("os/linux/capabilities-retain-set", map[string]any{"set": caps})}}, nil)
			r := start(t, p, RunOpts{Args: tc.args, Wrapper: []string{"setpriv", "--inh-caps=+sys_ptrace,+dac_read_search,+net_admin", "--"}})
			// PID 1's sets, read from the host: no app can (it has no
			// pid in the apps' namespace).
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", podPid(t, p)))
			must(t, err)
			waitFor(t, eventDeadline, "the app's status", func() bool { return strings.Contains(r.Stdout.String(), "status CapAmb") })
			must(t, r.Cmd.Process.Signal(unix.SIGTERM))
			if r.Wait(t); r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			pid1 := map[string]string{}
			for _, l := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "Cap") {
					pid1[k] = strings.TrimSpace(v)
				}
			}
			bnd := tc.bnd
			if bnd == "" {
				var o, need uint64
				_, _ = fmt.Sscanf(own["CapBnd"], "%x", &o)
				_, _ = fmt.Sscanf(capMask(t, append(append([]string{}, pid1Needs...), caps...)...), "%x", &need)
				bnd = fmt.Sprintf("%016x", o&need)
			}
			for k, v := range map[string]string{"CapInh": "0000000000000000", "CapPrm": own["CapPrm"], "CapEff": own["CapEff"], "CapBnd": bnd, "CapAmb": "0000000000000000"} {
				if pid1[k] != v {
					t.Errorf("PID 1's %s %q, want %s", k, pid1[k], v)
				}
			}
			if app := procStatus(t, r.Stdout.String()); app["CapInh"] != "0000000000000000" {
				t.Errorf("the app's CapInh %s, want none", app["CapInh"])
			}
		})
	}
}

// selfStatus is the test's own capability sets, by /proc/self/status key.
func selfStatus(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "Cap") {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}
