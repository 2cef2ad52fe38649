package journalfile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	testMachine = mustID("0123456789abcdef0123456789abcdef")
	testBoot    = mustID("fedcba9876543210fedcba9876543210")
)

func mustID(s string) ID128 {
	id, err := ParseID128(s)
	if err != nil {
		panic(err)
	}
	return id
}

// journalctl runs the host's journalctl on the file, bounded; the test
// skips where there is none (the format's reader is systemd's own).
func journalctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("journalctl")
	if err != nil {
		t.Skip("no journalctl: the file's reader is systemd's")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err = c.Run()
	if err != nil {
		return out.String(), fmt.Errorf("journalctl %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// create makes a file in a new temporary directory, and returns its path.
func create(t testing.TB, opts Options) (*Writer, string) {
	t.Helper()
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	w, err := CreateAt(fd, Active, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w, filepath.Join(dir, Active)
}

func fieldsOf(kv ...string) [][]byte {
	f := make([][]byte, len(kv))
	for i, s := range kv {
		f[i] = []byte(s)
	}
	return f
}

// Entries written are what journalctl reads back, in order, with every
// field, and the file passes journalctl --verify, online (while the
// writer has it) and after Close. Many entries share fields, so data
// objects' entry arrays and the file's grow through several arrays.
func TestJournalctlReadsAndVerifiesTheFile(t *testing.T) {
	w, path := create(t, Options{Machine: testMachine, Boot: testBoot, MaxSize: 8 << 20})
	base := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	const n = 300
	for i := range n {
		app := []string{"web", "db", "cache"}[i%3]
		err := w.Append(base.Add(time.Duration(i)*time.Millisecond), time.Duration(i+1)*time.Second, fieldsOf(
			fmt.Sprintf("MESSAGE=line %d of %s", i, app),
			"PRIORITY=6",
			"SYSLOG_IDENTIFIER="+app,
			"_MACHINE_ID=0123456789abcdef0123456789abcdef",
			"_HOSTNAME=rkt-pod",
			"MESSAGE=line 0 of web", // a duplicate of an earlier payload, or of this entry's own
		))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if i%50 == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		if out, err := journalctl(t, "--verify", "--file="+path); err != nil {
			t.Fatalf("%s: %v\n%s", when, err, out)
		}
		out, err := journalctl(t, "--file="+path, "-o", "json", "--no-pager")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != n {
			t.Fatalf("%s: journalctl read %d entries, want %d", when, len(lines), n)
		}
		for i, l := range lines {
			var e map[string]any
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("%s: entry %d: %v", when, i, err)
			}
			app := []string{"web", "db", "cache"}[i%3]
			if e["SYSLOG_IDENTIFIER"] != app || e["_HOSTNAME"] != "rkt-pod" || e["PRIORITY"] != "6" {
				t.Errorf("%s: entry %d: %v", when, i, e)
			}
			if e["__REALTIME_TIMESTAMP"] != fmt.Sprint(base.Add(time.Duration(i)*time.Millisecond).UnixMicro()) {
				t.Errorf("%s: entry %d realtime %v", when, i, e["__REALTIME_TIMESTAMP"])
			}
			// Two MESSAGE fields: journalctl's JSON gives both.
			msgs, _ := e["MESSAGE"].([]any)
			if i > 0 && (len(msgs) != 2 || !containsAll(msgs, fmt.Sprintf("line %d of %s", i, app), "line 0 of web")) {
				t.Errorf("%s: entry %d MESSAGE %v", when, i, e["MESSAGE"])
			}
		}
		// journalctl's own match, through the field and data objects.
		out, err = journalctl(t, "--file="+path, "-o", "json", "SYSLOG_IDENTIFIER=db", "--no-pager")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got := strings.Count(out, `"SYSLOG_IDENTIFIER":"db"`); got != n/3 || strings.Count(out, "\n") != n/3 {
			t.Errorf("%s: SYSLOG_IDENTIFIER=db matched %d entries, want %d", when, got, n/3)
		}
	}
	check("online")
	if err := w.Close(false); err != nil {
		t.Fatal(err)
	}
	check("offline")
}

func containsAll(vs []any, want ...string) bool {
	for _, w := range want {
		found := false
		for _, v := range vs {
			found = found || v == w
		}
		if !found {
			return false
		}
	}
	return true
}

// An entry that would take the file past its cap is refused whole: the
// file keeps every entry before it, and verifies.
func TestAppendPastTheCapWritesNothing(t *testing.T) {
	w, path := create(t, Options{Machine: testMachine, Boot: testBoot, MaxSize: 1 << 20})
	n := 0
	for ; ; n++ {
		err := w.Append(time.Now(), time.Duration(n+1)*time.Second, fieldsOf(fmt.Sprintf("MESSAGE=%d %s", n, strings.Repeat("x", 200)), "SYSLOG_IDENTIFIER=app"))
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("no entry fit in 1 MiB")
	}
	if err := w.Close(true); err != nil {
		t.Fatal(err)
	}
	if out, err := journalctl(t, "--verify", "--file="+path); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := journalctl(t, "--file="+path, "-o", "cat", "--no-pager")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out, "\n"); got != n {
		t.Errorf("journalctl read %d entries, want the %d appended", got, n)
	}
}

// Bad fields are refused before anything is written.
func TestAppendRefusesBadFields(t *testing.T) {
	w, _ := create(t, Options{Machine: testMachine, Boot: testBoot, MaxSize: 1 << 20})
	defer func() { _ = w.Close(false) }()
	for _, bad := range []string{"MESSAGE", "=x", "message=x", "1A=x", "A B=x", strings.Repeat("A", 65) + "=x"} {
		if err := w.Append(time.Now(), time.Second, fieldsOf(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	if w.Entries() != 0 {
		t.Errorf("%d entries after refusals", w.Entries())
	}
}

// Thousands of entries whose messages repeat and whose shared values
// outgrow the writer's cache: data objects are found again in the file
// (their entry arrays' tails read back), journalctl's matches find every
// entry of a value, the file verifies, and the writer's memory holds no
// more than its bounds.
func TestValuesFoundAgainInTheFile(t *testing.T) {
	w, path := create(t, Options{Machine: testMachine, Boot: testBoot, MaxSize: 8 << 20})
	const n, msgs, apps = 12000, 3000, 300
	base := time.Now().Add(-time.Hour)
	for i := range n {
		err := w.Append(base.Add(time.Duration(i)*time.Microsecond), time.Duration(i+1)*time.Millisecond, fieldsOf(
			fmt.Sprintf("MESSAGE=message %d", i%msgs),
			fmt.Sprintf("SYSLOG_IDENTIFIER=app%d", i%apps),
			"PRIORITY=6",
		))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if len(w.shared) > maxShared || len(w.fields) != 3 {
		t.Errorf("writer holds %d shared data objects and %d fields", len(w.shared), len(w.fields))
	}
	if err := w.Close(false); err != nil {
		t.Fatal(err)
	}
	if out, err := journalctl(t, "--verify", "--file="+path); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for match, want := range map[string]int{"MESSAGE=message 7": n / msgs, "SYSLOG_IDENTIFIER=app7": n / apps, "PRIORITY=6": n} {
		out, err := journalctl(t, "--file="+path, "-o", "export", "--no-pager", match)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(out, "\n"+match+"\n"); got != want {
			t.Errorf("%s: %d entries, want %d", match, got, want)
		}
	}
}

// BenchmarkAppend is a pod's line: a new message, an app's name and
// priority, the pod's machine id and hostname.
func BenchmarkAppend(b *testing.B) {
	w, _ := create(b, Options{Machine: testMachine, Boot: testBoot, MaxSize: 64 << 20})
	defer func() { _ = w.Close(false) }()
	msg := []byte("MESSAGE=GET /index.html HTTP/1.1 200 612 - curl/8.5.0 00000000")
	fields := fieldsOf("PRIORITY=6", "SYSLOG_IDENTIFIER=web", "_MACHINE_ID=0123456789abcdef0123456789abcdef", "_HOSTNAME=rkt-pod")
	fields = append(fields, msg)
	for i := 0; b.Loop(); i++ {
		copy(msg[len(msg)-8:], fmt.Sprintf("%08d", i%100000000))
		if err := w.Append(time.Now(), time.Duration(i+1)*time.Microsecond, fields); errors.Is(err, ErrFull) {
			b.Skip("file full")
		} else if err != nil {
			b.Fatal(err)
		}
	}
}

// A full file is archived under journald's name and a new one continues
// the sequence; past keep archived files the oldest go. journalctl reads
// the directory's files as one journal, in order, and verifies each.
func TestDirRotatesAndKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(fd, Options{Machine: testMachine, Boot: testBoot, MaxSize: 1 << 20}, 2)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for i := range n {
		if err := d.Append(time.Now(), time.Duration(i+1)*time.Millisecond, fieldsOf(fmt.Sprintf("MESSAGE=%06d %s", i, strings.Repeat("x", 100)), "SYSLOG_IDENTIFIER=app")); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	archived, _ := filepath.Glob(filepath.Join(dir, "system@*.journal"))
	if len(files) != 3 || len(archived) != 2 {
		t.Fatalf("directory holds %v; want system.journal and 2 archived", files)
	}
	for _, f := range files {
		if out, err := journalctl(t, "--verify", "--file="+f); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	out, err := journalctl(t, "--directory="+dir, "-o", "cat", "--no-pager")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The newest entries, in order, through the last: none lost between
	// the files that are kept.
	first := n - len(lines)
	if first <= 0 {
		t.Fatalf("journalctl read %d entries: nothing was removed", len(lines))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, fmt.Sprintf("%06d ", first+i)) {
			t.Fatalf("entry %d of what is kept: %.20q, want %06d", i, l, first+i)
		}
	}
}
