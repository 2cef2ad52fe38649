package handover_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/stage1-init/handover/internal/cheader"
)

// The C programs' numbers and names are the Go processes': the header
// they include is exactly what handover.go's constants make. An edit of
// either alone fails here; go generate in this directory makes the
// header again.
func TestCHeaderIsGenerated(t *testing.T) {
	want, err := cheader.Generate("handover.go")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../waiter/handover.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("waiter/handover.h is not what handover.go makes (run go generate in stage1-init/handover):\n%s", lineDiff(string(got), string(want)))
	}
	// And the C programs use it.
	for _, c := range []string{"../../waiter/waiter.c", "../../pause/pause.c"} {
		src, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), `#include "../waiter/handover.h"`) && !strings.Contains(string(src), `#include "handover.h"`) {
			t.Errorf("%s does not include handover.h", c)
		}
	}
}

// lineDiff names the lines of got and want that differ.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			fmt.Fprintf(&b, "line %d: the header has %q, handover.go makes %q\n", i+1, gl, wl)
		}
	}
	return b.String()
}

// The report's fields are in the order the waiter reads them, each ended
// by a NUL, "-" for no bind; a path with a NUL is refused, not cut.
func TestReportEncode(t *testing.T) {
	r := handover.Report{PID1: 42, Keeper: 43, Cgroups: []string{"/sys/fs/cgroup/a", "/sys/fs/cgroup/b"}}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "42\x0043\x00-\x00/sys/fs/cgroup/a\x00/sys/fs/cgroup/b\x00"; got != want {
		t.Errorf("report %q, want %q", got, want)
	}
	fields := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if fields[handover.ReportPID1] != "42" || fields[handover.ReportKeeper] != "43" ||
		fields[handover.ReportStage2] != handover.ReportNoBind || fields[handover.ReportFirstCgroup] != "/sys/fs/cgroup/a" {
		t.Errorf("fields %q out of their places", fields)
	}
	r.Stage2 = "/pod/stage1/rootfs/opt/stage2"
	if b, err := r.Encode(); err != nil || !strings.Contains(string(b), "\x00/pod/stage1/rootfs/opt/stage2\x00") {
		t.Errorf("report with a bind: %q, %v", b, err)
	}
	r.Cgroups = append(r.Cgroups, "/sys/fs/cgroup/x\x00y")
	if b, err := r.Encode(); err == nil {
		t.Errorf("a path with a NUL: %q, no error", b)
	}
}
