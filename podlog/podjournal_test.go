package podlog

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Each line of an app, from its stdout and its stderr, is an entry of the
// pod's own journal with the fields journalctl -M and -t read: the app's
// name as SYSLOG_IDENTIFIER, the stream's priority, the pod's machine id,
// hostname and the host's boot id; the file is made at the first line,
// and is offline and verifies once the forwarder is closed.
func TestPodJournalEntries(t *testing.T) {
	bin, err := exec.LookPath("journalctl")
	if err != nil {
		t.Skip("no journalctl: the pod's journal's reader is systemd's")
	}
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	const machine, boot = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	f, err := NewWithPodJournal("u", false, -1, -1, PodJournal{Dir: fd, Machine: machine, Boot: boot, Hostname: "rkt-u"})
	if err != nil {
		t.Fatal(err)
	}
	f.SetConsole(-1, -1)
	for _, s := range []struct {
		stream int
		text   string
	}{{Stdout, "hello\nworld\n"}, {Stderr, "oops\n"}} {
		w, err := f.Pipe("web", s.stream, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(s.text)); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	f.Close(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "--verify", "--directory="+dir).CombinedOutput(); err != nil {
		t.Fatalf("journalctl --verify: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "--directory="+dir, "-o", "json", "--no-pager", "SYSLOG_IDENTIFIER=web").Output()
	if err != nil {
		t.Fatalf("journalctl: %v", err)
	}
	got := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		got[e["MESSAGE"].(string)] = e
	}
	for msg, prio := range map[string]string{"hello": "6", "world": "6", "oops": "3"} {
		e := got[msg]
		if e == nil {
			t.Errorf("no entry %q in %s", msg, out)
			continue
		}
		for k, v := range map[string]string{"PRIORITY": prio, "_MACHINE_ID": machine, "_BOOT_ID": boot,
			"_HOSTNAME": "rkt-u", "_TRANSPORT": "stdout", "POD1_APP": "web", "POD1_POD_UUID": "u"} {
			if e[k] != v {
				t.Errorf("entry %q: %s=%v, want %s", msg, k, e[k], v)
			}
		}
	}
	if len(got) != 3 {
		t.Errorf("%d entries, want 3: %s", len(got), out)
	}
}
