package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// journald names the unit of an entry's sender from the sender's cgroup
// path (the first part that is not a slice), and the pod's lines are sent
// by its PID 1, in <pod's cgroup>/stage1. The pod's cgroup is named as
// systemd-machined's scope for the machine rkt-<uuid>, so where nothing
// but slices is above it (a v2-only host: the caller's slice; the root)
// `journalctl -u machine-rkt\x2d<uuid>.scope` gives the pod's lines,
// without systemd as PID 1 or machined. (`journalctl
// -M rkt-<uuid>` reads a journal in the pod, which pod1 has not:
// docs/conformance.md.)
func TestJournalFindsThePodByItsUnit(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			t.Skip("no cgroup2 tree: journald reads the unit from the name=systemd hierarchy, where the pod has no cgroup")
		}
	}
	ns := newLogNS(t, true)
	p := newPod(t, []App{{Name: "a", Exec: probe("out", "1", "3", "unit-line", "+", "sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{Wrapper: ns.wrapper(p)})
	runningApp(t, p, "a")
	sub, err := os.ReadFile(filepath.Join(p.Dir, layout.Subcgroup))
	must(t, err)
	parts := strings.Split(strings.Trim(string(sub), "/"), "/")
	for _, above := range parts[:len(parts)-1] {
		if !strings.HasSuffix(above, ".slice") {
			t.Skipf("the pod's cgroup %s is below %s, which journald takes for the unit (a caller's scope or service on a v1 or hybrid host)", sub, above)
		}
	}
	// Spelt out, not taken from the code under test.
	unit := "machine-" + strings.ReplaceAll("rkt-"+p.UUID, "-", `\x2d`) + ".scope"
	// While PID 1 lives: journald reads the sender's cgroup from /proc
	// when an entry arrives, and one it reads after the sender is gone
	// has no unit (POD1_POD_UUID is on every entry).
	var got []string
	var out []byte
	waitFor(t, eventDeadline, "journalctl -u "+unit+" to give the pod's three lines", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
		defer cancel()
		if o, err := ns.cmd(ctx, "/", "journalctl", "--sync").CombinedOutput(); err != nil {
			t.Fatalf("journalctl --sync: %v %s", err, o)
		}
		out, err = ns.cmd(ctx, "/", "journalctl", "--no-pager", "--output=json", "-u", unit).Output()
		if err != nil {
			t.Fatalf("journalctl -u %s: %v", unit, err)
		}
		got = nil
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l == "" {
				continue
			}
			var e map[string]any
			must(t, json.Unmarshal([]byte(l), &e))
			if e["POD1_POD_UUID"] != p.UUID {
				t.Fatalf("journalctl -u %s gave an entry of another pod: %v", unit, e)
			}
			if m, _ := e["MESSAGE"].(string); strings.HasPrefix(m, "unit-line") {
				got = append(got, m)
			}
		}
		if len(got) >= 3 {
			return true
		}
		time.Sleep(50 * time.Millisecond)
		return false
	})
	if strings.Join(got, "\n") != "unit-line 0\nunit-line 1\nunit-line 2" {
		t.Errorf("journalctl -u %s: lines %q, want the pod's three; journalctl said:\n%s", unit, got, out)
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
}
