package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// journaldConf makes the test's journald keep everything in memory and
// take every line (no rate limit), and forward nothing.
const journaldConf = `[Journal]
Storage=volatile
RateLimitBurst=0
ForwardToSyslog=no
ForwardToWall=no
ForwardToConsole=no
ForwardToKMsg=no
Audit=no
`

// logNS is a private mount namespace whose /run/systemd, /run/log and
// /var/log/journal are empty tmpfs: a journald started in it listens on a
// socket only the test's pods see, and whatever the host runs (a journald
// of its own, other tests' pods) neither sees it nor is seen. Without
// journald it is a host with no journal.
type logNS struct {
	holder   *exec.Cmd
	pid      int
	journald *exec.Cmd
}

func newLogNS(t *testing.T, withJournald bool) *logNS {
	t.Helper()
	for _, d := range []string{"/run/systemd", "/run/log", "/var/log/journal"} {
		must(t, os.MkdirAll(d, 0o755))
	}
	conf := filepath.Join(t.TempDir(), "journald.conf")
	must(t, os.WriteFile(conf, []byte(journaldConf), 0o644))
	script := "set -e; for d in /run/systemd /run/log /var/log/journal; do mount -t tmpfs tmpfs $d; done; " +
		"mkdir -p /run/systemd/journal; "
	if _, err := os.Stat("/etc/systemd/journald.conf"); err == nil {
		script += "mount --bind " + conf + " /etc/systemd/journald.conf; "
	}
	script += "echo ready; exec sleep 600"
	ns := &logNS{holder: exec.Command("unshare", "--mount", "--propagation=private", "--", "sh", "-c", script)}
	out, err := ns.holder.StdoutPipe()
	must(t, err)
	ns.holder.Stderr = os.Stderr
	must(t, ns.holder.Start())
	t.Cleanup(func() {
		if ns.journald != nil {
			_ = ns.journald.Process.Kill()
			_ = ns.journald.Wait()
		}
		_ = ns.holder.Process.Kill()
		_ = ns.holder.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		ready <- l == "ready\n"
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("mount namespace setup failed")
		}
	case <-time.After(eventDeadline):
		t.Fatal("mount namespace setup timed out")
	}
	ns.pid = ns.holder.Process.Pid
	if withJournald {
		ns.startJournald(t)
	}
	return ns
}

func (ns *logNS) startJournald(t *testing.T) {
	t.Helper()
	ns.journald = exec.Command("nsenter", "-t", strconv.Itoa(ns.pid), "-m", "--", "/lib/systemd/systemd-journald")
	must(t, ns.journald.Start())
	sock := fmt.Sprintf("/proc/%d/root/run/systemd/journal/socket", ns.pid)
	waitFor(t, 10*time.Second, "journald's socket", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
}

// enter is the command prefix that runs a command in the namespace, in
// dir. The directory is entered after the namespace: nsenter's --wd opens
// it before, which leaves the command a working directory in the host's
// mount tree, outside its root.
func (ns *logNS) enter(dir string) []string {
	return []string{"nsenter", "-t", strconv.Itoa(ns.pid), "-m", "--", "env", "--chdir=" + dir}
}

// cmd runs a command in the namespace, in dir.
func (ns *logNS) cmd(ctx context.Context, dir string, argv ...string) *exec.Cmd {
	full := append(ns.enter(dir), argv...)
	return exec.CommandContext(ctx, full[0], full[1:]...)
}

// wrapper starts a stage1 inside the namespace.
func (ns *logNS) wrapper(p *Pod) []string { return ns.enter(p.Dir) }

// entries returns the journal entries of pod uuid, once journald has
// written everything it received.
func (ns *logNS) entries(t *testing.T, uuid string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	if out, err := ns.cmd(ctx, "/", "journalctl", "--sync").CombinedOutput(); err != nil {
		t.Fatalf("journalctl --sync: %v %s", err, out)
	}
	out, err := ns.cmd(ctx, "/", "journalctl", "--no-pager", "--output=json", "POD1_POD_UUID="+uuid).Output()
	if err != nil {
		t.Fatalf("journalctl: %v", err)
	}
	var es []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" {
			continue
		}
		var e map[string]any
		must(t, json.Unmarshal([]byte(l), &e))
		es = append(es, e)
	}
	return es
}

// Lines of two apps come back from journalctl with the fields a user
// filters on, every line, in order per stream; the console still gets
// them; no log file is made.
func TestJournalTwoApps(t *testing.T) {
	ns := newLogNS(t, true)
	const n = 200
	p := newPod(t, []App{
		{Name: "alpha", Exec: probe("out", "1", strconv.Itoa(n), "alpha-out", "+", "out", "2", strconv.Itoa(n), "alpha-err", "+", "raw", "1", "alpha-last")},
		{Name: "beta", Exec: probe("out", "2", strconv.Itoa(n), "beta-err", "+", "out", "1", strconv.Itoa(n), "beta-out")},
	}, nil)
	r := runPod(t, p, RunOpts{Wrapper: ns.wrapper(p)})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	got := map[string][]string{}
	for _, e := range ns.entries(t, p.UUID) {
		app, _ := e["SYSLOG_IDENTIFIER"].(string)
		stream, _ := e["POD1_STREAM"].(string)
		msg, _ := e["MESSAGE"].(string)
		if e["POD1_APP"] != app {
			t.Fatalf("POD1_APP %v, SYSLOG_IDENTIFIER %v", e["POD1_APP"], app)
		}
		want := map[string]string{"stdout": "6", "stderr": "3"}[stream]
		if e["PRIORITY"] != want {
			t.Errorf("%s %s: PRIORITY %v, want %s", app, stream, e["PRIORITY"], want)
		}
		got[app+" "+stream] = append(got[app+" "+stream], msg)
	}
	for _, k := range []string{"alpha stdout", "alpha stderr", "beta stdout", "beta stderr"} {
		f := strings.Fields(k)
		var want []string
		for i := 0; i < n; i++ {
			want = append(want, fmt.Sprintf("%s-%s %d", f[0], f[1][3:], i))
		}
		if k == "alpha stdout" {
			// A last line without a newline, written just before
			// the app exits, is carried too.
			want = append(want, "alpha-last")
		}
		if strings.Join(got[k], "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: got %d lines, want %d in order; first %q", k, len(got[k]), len(want), first(got[k], 3))
		}
	}
	// (alpha-last has no newline: the next line on the console follows
	// it on the same line.)
	for i := 0; i < n; i++ {
		for _, l := range []string{"alpha-out", "beta-out"} {
			if !strings.Contains(r.Stdout.String(), fmt.Sprintf("%s %d\n", l, i)) {
				t.Fatalf("the console lost %s %d", l, i)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(p.Dir, layout.LogDir)); err == nil {
		t.Error("a pod logging to the journal made log files")
	}
	for _, a := range []string{"alpha", "beta"} {
		if rec := readRecord(t, p, a); rec.LogDropped != 0 {
			t.Errorf("%s: %d lines dropped; stage1 said %s", a, rec.LogDropped, r.Stderr)
		}
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func readRecord(t *testing.T, p *Pod, app string) *status.Record {
	t.Helper()
	rec, err := status.ReadRecord(p.statusDir(), app)
	must(t, err)
	return rec
}

// A journal that stops reading (SIGSTOP) or dies (SIGKILL) while an app
// writes costs lines, counted in the app's record, never the app's
// progress: the app writes on and exits, the console gets every line, the
// pod ends.
func TestJournalStalledOrKilled(t *testing.T) {
	for _, sig := range []unix.Signal{unix.SIGSTOP, unix.SIGKILL} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			ns := newLogNS(t, true)
			const n = 5000
			p := newPod(t, []App{{Name: "a", Exec: probe("out", "1", "1", "before", "+", "wait-file", "/tmp/go", "+", "out", "1", strconv.Itoa(n), "flood")}}, nil)
			r := start(t, p, RunOpts{Wrapper: ns.wrapper(p)})
			waitFor(t, 10*time.Second, "the first line in the journal", func() bool {
				return len(ns.entries(t, p.UUID)) == 1
			})
			must(t, ns.journald.Process.Signal(sig))
			if sig == unix.SIGSTOP {
				t.Cleanup(func() { _ = ns.journald.Process.Signal(unix.SIGCONT) })
			}
			released := time.Now()
			must(t, os.WriteFile(filepath.Join(p.Dir, "stage1/rootfs/opt/stage2/a/rootfs/tmp/go"), nil, 0o644))
			if code := r.Wait(t); code != 0 {
				t.Fatalf("exit %d: %s", code, r.Stderr)
			}
			// The app's own run plus, at most, the bounded wait for
			// the journal at the pod's end: an app or a pod that
			// waited for the stopped journal would never end, which
			// r.Wait's event deadline turns into a failure.
			t.Logf("the pod ended %v after the app was released", time.Since(released))
			if got := len(r.Lines("flood ")); got != n {
				t.Errorf("the console got %d of %d lines", got, n)
			}
			if rec := readRecord(t, p, "a"); rec.LogDropped == 0 {
				t.Errorf("no dropped line counted: %+v", rec)
			} else {
				t.Logf("%d of %d lines dropped", rec.LogDropped, n)
			}
		})
	}
}

// PID 1 keeps one socket to journald for the pod's life: a journald
// restarted while the pod runs (a new socket at the same path) gets the
// lines written after its start, every one, and a line's bytes arrive
// as written (an '=', a tab). (An app's arguments pass through the pod
// manifest's JSON, which has no bytes that are not UTF-8.)
func TestJournalRestarted(t *testing.T) {
	ns := newLogNS(t, true)
	const n = 300
	odd := "k=v\tx  end="
	p := newPod(t, []App{{Name: "a", Exec: probe("out", "1", "1", "before", "+", "wait-file", "/tmp/go",
		"+", "out", "1", strconv.Itoa(n), "after", "+", "raw", "2", odd+"\n")}}, nil)
	r := start(t, p, RunOpts{Wrapper: ns.wrapper(p)})
	waitFor(t, 10*time.Second, "the first line in the journal", func() bool {
		return len(ns.entries(t, p.UUID)) == 1
	})
	must(t, ns.journald.Process.Kill())
	_ = ns.journald.Wait()
	// The killed journald's socket file stays: the new one is up once
	// it has made its own.
	must(t, os.Remove(fmt.Sprintf("/proc/%d/root/run/systemd/journal/socket", ns.pid)))
	ns.startJournald(t)
	must(t, os.WriteFile(filepath.Join(p.Dir, "stage1/rootfs/opt/stage2/a/rootfs/tmp/go"), nil, 0o644))
	if code := r.Wait(t); code != 0 {
		t.Fatalf("exit %d: %s", code, r.Stderr)
	}
	var after []string
	var oddGot string
	for _, e := range ns.entries(t, p.UUID) {
		switch e["POD1_STREAM"] {
		case "stdout":
			if m, _ := e["MESSAGE"].(string); strings.HasPrefix(m, "after ") {
				after = append(after, m)
			}
		case "stderr":
			oddGot, _ = e["MESSAGE"].(string)
		}
	}
	var want []string
	for i := 0; i < n; i++ {
		want = append(want, fmt.Sprintf("after %d", i))
	}
	if strings.Join(after, "\n") != strings.Join(want, "\n") {
		t.Errorf("the restarted journald got %d of %d lines in order; first %q", len(after), n, first(after, 3))
	}
	if oddGot != odd {
		t.Errorf("the odd line came back as %q, want %q", oddGot, odd)
	}
	if rec := readRecord(t, p, "a"); rec.LogDropped != 0 {
		t.Errorf("%d lines dropped; stage1 said %s", rec.LogDropped, r.Stderr)
	}
}

// A journald that falls behind gets the lines waiting for it sent
// together, several lines of one stream in one entry (POD1_LINES says how
// many), so that they reach it instead of being dropped once the queue
// is full: here every line of a burst written while journald was
// stopped arrives, in order, and none is dropped; pod1 logs prints them
// one by one.
func TestJournalBehindGetsLinesTogether(t *testing.T) {
	ns := newLogNS(t, true)
	data := dataDir(t)
	const n = 12000
	p := runInNS(t, ns, data, []string{"a", "out", "1", "1", "before", "+", "wait-file", "/tmp/go",
		"+", "out", "1", strconv.Itoa(n), "flood", "+", "touch", "/tmp/flooded", "+", "wait-file", "/tmp/end"})
	waitFor(t, 10*time.Second, "the first line in the journal", func() bool {
		return len(ns.entries(t, p.UUID)) == 1
	})
	must(t, ns.journald.Process.Signal(unix.SIGSTOP))
	t.Cleanup(func() { _ = ns.journald.Process.Signal(unix.SIGCONT) })
	rootfs := filepath.Join(p.Dir, "stage1/rootfs/opt/stage2/a/rootfs")
	must(t, os.WriteFile(filepath.Join(rootfs, "tmp/go"), nil, 0o644))
	waitFor(t, 20*time.Second, "the burst written", func() bool {
		_, err := os.Stat(filepath.Join(rootfs, "tmp/flooded"))
		return err == nil
	})
	time.Sleep(200 * time.Millisecond)
	must(t, ns.journald.Process.Signal(unix.SIGCONT))
	var lines []string
	together := 0
	waitFor(t, 30*time.Second, "the burst in the journal", func() bool {
		lines, together = nil, 0
		for _, e := range ns.entries(t, p.UUID) {
			msg, _ := e["MESSAGE"].(string)
			ls := strings.Split(msg, "\n")
			if k, ok := e["POD1_LINES"].(string); ok {
				if k != strconv.Itoa(len(ls)) {
					t.Fatalf("POD1_LINES %s for %d lines", k, len(ls))
				}
				together++
			}
			if e["POD1_STREAM"] != "stdout" || e["SYSLOG_IDENTIFIER"] != "a" || e["PRIORITY"] != "6" {
				t.Fatalf("entry fields %v %v %v", e["POD1_STREAM"], e["SYSLOG_IDENTIFIER"], e["PRIORITY"])
			}
			lines = append(lines, ls...)
		}
		return len(lines) >= n+1
	})
	must(t, os.WriteFile(filepath.Join(rootfs, "tmp/end"), nil, 0o644))
	p.wait(t)
	want := []string{"before 0"}
	for i := 0; i < n; i++ {
		want = append(want, fmt.Sprintf("flood %d", i))
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the journal got %d lines, want %d in order; first %q", len(lines), len(want), first(lines, 3))
	}
	if together == 0 {
		t.Error("every line was an entry of its own: none was sent together")
	}
	rec, err := status.ReadRecord(filepath.Join(p.Dir, "stage1/rootfs/rkt/status"), "a")
	if err != nil || rec.LogDropped != 0 {
		t.Errorf("record %+v (%v): lines dropped; stage1 said %s", rec, err, p.Stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	out, err := ns.cmd(ctx, "/", bin("pod1"), "logs", "--dir="+data, p.UUID).Output()
	if err != nil {
		t.Fatalf("pod1 logs: %v", err)
	}
	if got := string(out); got != "a: "+strings.Join(want, "\na: ")+"\n" {
		t.Errorf("pod1 logs printed %d lines; first %q", strings.Count(got, "\n"), got[:min(len(got), 80)])
	}
	t.Logf("%d lines, %d entries of several", n+1, together)
}
