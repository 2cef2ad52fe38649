package tests

import (
	"os"
	"testing"

	"github.com/pod1/pod1/status"
)

// The console (rkt run's stdout and stderr) is best effort, but a byte it
// does not take is never lost silently: with the stage1's stdout a pipe
// whose reader is gone (EPIPE on every write), the app still runs to its
// end, its output still reaches the log sinks, and its record counts the
// bytes the console did not take. Before, they were dropped without a
// trace, which left a vanished line (rkt's TestNetCustomBridge, issue 14)
// with no explanation.
func TestConsoleGoneIsCounted(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("out", "1", "3", "console-gone")}}, nil)
	r, w, err := os.Pipe()
	must(t, err)
	must(t, r.Close())
	run := start(t, p, RunOpts{Stdout: w})
	must(t, w.Close())
	if code := run.Wait(t); code != 0 {
		t.Fatalf("pod exit %d, stderr %s", code, run.Stderr)
	}
	if got := p.Status(t, "a"); got != 0 {
		t.Fatalf("a: status %d, stderr %s", got, run.Stderr)
	}
	rec, err := status.ReadRecord(p.statusDir(), "a")
	must(t, err)
	// "console-gone 0\n" .. "console-gone 2\n"
	const want = uint64(3 * len("console-gone 0\n"))
	if rec.ConsoleDropped != want {
		t.Errorf("consoleDropped %d, want %d (record %+v)", rec.ConsoleDropped, want, rec)
	}
	if rec.LogDropped != 0 {
		t.Errorf("logDropped %d: the log sinks lost lines too", rec.LogDropped)
	}
}
