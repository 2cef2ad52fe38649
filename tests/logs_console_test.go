package tests

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

// An app's stdout and stderr reach a console that is one file (rkt run's
// terminal) in the order the app wrote them. rkt's TestNetCustomBridge
// and TestNetCustomMacvlan wait on rkt run's pty for the line the app
// writes to stdout just before one on stderr; with a pipe per stream, PID
// 1 sometimes wrote the stderr line first, the stdout line was then the
// terminal's last output, and the test's reader (a regexp that reads one
// byte past the line) waited for a byte that never came.
func TestConsoleKeepsTheAppsOrder(t *testing.T) {
	const pairs = 300
	master, slave := openPTY(t)
	p := newPod(t, []App{{Name: "a", Exec: probe("interleave", strconv.Itoa(pairs))}}, nil)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(master) // to EIO, once the last slave is closed
		got <- b
	}()
	run := start(t, p, RunOpts{Stdout: slave, Stderr: slave})
	must(t, slave.Close())
	code := run.Wait(t)
	out := <-got
	if code != 0 {
		t.Fatalf("pod exit %d, console %q", code, out)
	}
	var want, lines []string
	for i := range pairs {
		want = append(want, fmt.Sprintf("out %d", i), fmt.Sprintf("err %d", i))
	}
	for _, l := range strings.Split(string(out), "\r\n") {
		if strings.HasPrefix(l, "out ") || strings.HasPrefix(l, "err ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("console has %d of the app's %d lines: %q", len(lines), len(want), out)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("console line %d is %q, the app wrote %q there (console %q)", i, lines[i], want[i], lines[max(0, i-3):min(len(lines), i+3)])
		}
	}
	rec, err := status.ReadRecord(p.statusDir(), "a")
	must(t, err)
	if rec.ConsoleDropped != 0 || rec.LogDropped != 0 {
		t.Errorf("consoleDropped %d, logDropped %d", rec.ConsoleDropped, rec.LogDropped)
	}
}

// openPTY returns a new pseudo-terminal's master and slave, both without
// O_NONBLOCK, as rkt's test harness hands rkt run its terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	must(t, err)
	master = os.NewFile(uintptr(m), "ptmx")
	t.Cleanup(func() { master.Close() })
	must(t, unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	must(t, err)
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	must(t, err)
	return master, slave
}
