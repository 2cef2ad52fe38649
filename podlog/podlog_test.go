package podlog

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openDir(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return dir, fd
}

// write sends chunks down a new stream of app and closes it.
func write(t *testing.T, f *Forwarder, app string, stream int, cri string, chunks ...string) {
	t.Helper()
	w, err := f.Pipe(app, stream, cri)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if _, err := w.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
}

// The file and CRI records of a stream: one per line, in order, exact
// bytes; a long line in partial pieces; a last line without a newline
// carried at the end; the console gets the bytes as written.
func TestRecords(t *testing.T) {
	dir, dfd := openDir(t)
	cdir, cfd := openDir(t)
	f := New("u", false, dfd, cfd)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	f.SetConsole(p[1], -1)
	long := strings.Repeat("x", lineMax+10)
	chunks := []string{"one\ntw", "o\n\n", "tab\there \xff\n", long + "\n", "last"}
	done := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(p[0], buf)
			if n <= 0 || err != nil {
				done <- b.Bytes()
				return
			}
			b.Write(buf[:n])
		}
	}()
	write(t, f, "web", Stdout, "web_0.log", chunks...)
	f.Close(5 * time.Second)
	unix.Close(p[1])
	if got := string(<-done); got != strings.Join(chunks, "") {
		t.Errorf("console got %q", got)
	}
	want := []struct {
		partial bool
		line    string
	}{{false, "one"}, {false, "two"}, {false, ""}, {false, "tab\there \xff"}, {true, long[:lineMax]}, {false, long[lineMax:]}, {true, "last"}}
	for _, path := range []string{filepath.Join(dir, "web.log"), filepath.Join(cdir, "web_0.log")} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%s: %d records, want %d", path, len(lines), len(want))
		}
		for i, l := range lines {
			ts, rest, _ := strings.Cut(l, " ")
			tm, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || tm.UTC().Format(time.RFC3339Nano) != ts || !strings.HasSuffix(ts, "Z") {
				t.Errorf("%s: record %d: time %q", path, i, ts)
			}
			tag := "F "
			if want[i].partial {
				tag = "P "
			}
			if strings.HasSuffix(path, "web_0.log") {
				// rkt's CRI format: no F/P tag.
				tag = ""
			}
			if rest != "stdout "+tag+want[i].line {
				t.Errorf("%s: record %d is %q, want %q", path, i, rest[:min(len(rest), 40)], ("stdout " + tag + " " + want[i].line)[:min(len(want[i].line)+9, 40)])
			}
		}
	}
	if f.Dropped("web") != 0 {
		t.Errorf("dropped %d", f.Dropped("web"))
	}
}

// stripTimes checks that every record of a file starts with a UTC RFC
// 3339 time with nanoseconds, as Go writes it, and ends with a newline,
// and returns the file with each time replaced by "T", for comparing
// the rest byte for byte.
func stripTimes(t *testing.T, b []byte) string {
	t.Helper()
	var out strings.Builder
	for _, rec := range strings.SplitAfter(string(b), "\n") {
		if rec == "" {
			continue
		}
		ts, rest, ok := strings.Cut(rec, " ")
		tm, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil || tm.UTC().Format(time.RFC3339Nano) != ts || !strings.HasSuffix(rec, "\n") {
			t.Fatalf("not a record: %q", rec[:min(len(rec), 60)])
		}
		out.WriteString("T " + rest)
	}
	return out.String()
}

// kubeletLines gives back the bytes of one stream from records in
// kubelet's format, as kubelet reads them: a full (F) record's line with
// a newline, a partial (P) one's without.
func kubeletLines(t *testing.T, stripped string) string {
	t.Helper()
	var out strings.Builder
	for _, rec := range strings.SplitAfter(stripped, "\n") {
		if rec == "" {
			continue
		}
		f := strings.SplitN(strings.TrimSuffix(rec, "\n"), " ", 4)
		if len(f) != 4 || (f[2] != "F" && f[2] != "P") {
			t.Fatalf("not a kubelet record: %q", rec[:min(len(rec), 60)])
		}
		out.WriteString(f[3])
		if f[2] == "F" {
			out.WriteString("\n")
		}
	}
	return out.String()
}

// With the kubelet format chosen, a CRI file is kubelet's, byte for
// byte: a full line F, a long line cut at lineMax into P records and an
// F for its rest, a last line without a newline P; kubelet reading it
// back gets exactly the bytes the app wrote. The default stays rkt's
// untagged format (TestRecords).
func TestKubeletCRIRecords(t *testing.T) {
	cdir, cfd := openDir(t)
	f := New("u", false, -1, cfd)
	f.SetConsole(-1, -1)
	f.SetCRIFormat(true)
	long := strings.Repeat("y", 2*lineMax+5)
	exact := strings.Repeat("z", lineMax)
	out := []string{"one\n", "\n", long + "\n", exact + "\n", "last"}
	write(t, f, "web", Stdout, "web_0.log", out...)
	write(t, f, "web", Stderr, "web_0.log", "oops\n", "no newline")
	f.Close(5 * time.Second)
	b, err := os.ReadFile(filepath.Join(cdir, "web_0.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The two streams' records interleave as their readers run; each
	// stream's are in order.
	var stdout, stderr strings.Builder
	for _, rec := range strings.SplitAfter(stripTimes(t, b), "\n") {
		if strings.HasPrefix(rec, "T stderr ") {
			stderr.WriteString(rec)
		} else {
			stdout.WriteString(rec)
		}
	}
	wantOut := "T stdout F one\n" +
		"T stdout F \n" +
		"T stdout P " + long[:lineMax] + "\n" +
		"T stdout P " + long[lineMax:2*lineMax] + "\n" +
		"T stdout F " + long[2*lineMax:] + "\n" +
		// A line of exactly lineMax bytes fills the buffer before its
		// newline is read: a P record, then an empty F one.
		"T stdout P " + exact + "\n" +
		"T stdout F \n" +
		"T stdout P last\n"
	wantErr := "T stderr F oops\nT stderr P no newline\n"
	for _, c := range []struct{ got, want string }{{stdout.String(), wantOut}, {stderr.String(), wantErr}} {
		if c.got != c.want {
			i := 0
			for i < min(len(c.got), len(c.want)) && c.got[i] == c.want[i] {
				i++
			}
			t.Errorf("CRI file differs at byte %d of the stream's records: got %q, want %q", i, c.got[i:min(len(c.got), i+40)], c.want[i:min(len(c.want), i+40)])
		}
	}
	if kubeletLines(t, stdout.String()) != strings.Join(out, "") || kubeletLines(t, stderr.String()) != "oops\nno newline" {
		t.Error("kubelet would not read back the bytes the app wrote")
	}
	if f.Dropped("web") != 0 {
		t.Errorf("dropped %d", f.Dropped("web"))
	}
}

// A file reaching MaxFileSize becomes <app>.log.1 and a new one starts;
// ReadApp returns both parts, in order, and a follower's cursor carries
// across a rotation.
func TestRotation(t *testing.T) {
	_, dfd := openDir(t)
	f := New("u", false, dup(t, dfd), -1)
	f.SetConsole(-1, -1)
	w, err := f.Pipe("a", Stdout, "")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("y", 100)
	n := 0
	var cur Cursor
	var got []Record
	// Enough for more than one rotation: only the latest two parts
	// remain.
	for total := 0; total < 5*MaxFileSize/2; total += len(line) + 50 {
		fmt.Fprintf(w, "%d %s\n", n, line)
		n++
		if n%5000 == 0 {
			// The writer is at most a pipe's worth ahead: reading
			// this often, the follower sees each part before it is
			// rotated away.
			var recs []Record
			recs, cur, err = ReadApp(dfd, "a", cur)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, recs...)
		}
	}
	w.Close()
	f.Close(5 * time.Second)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, OldFileName("a"), &st, 0); err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
	if st.Size > MaxFileSize {
		t.Errorf("rotated file is %d bytes", st.Size)
	}
	recs, _, err := ReadApp(dfd, "a", cur)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, recs...)
	for i, r := range got {
		if want := fmt.Sprintf("%d %s", i, line); string(r.Line) != want {
			t.Fatalf("follower: record %d is %.20q, want %.20q (of %d)", i, r.Line, want, len(got))
		}
	}
	if len(got) != n {
		t.Errorf("follower read %d records, want %d", len(got), n)
	}
	all, _, err := ReadApp(dfd, "a", Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	// Two rotations: the first part is gone, the rest is there in order.
	if len(all) == 0 || len(all) >= n {
		t.Fatalf("a fresh read got %d records of %d written", len(all), n)
	}
	for i, r := range all {
		if want := fmt.Sprintf("%d %s", n-len(all)+i, line); string(r.Line) != want {
			t.Fatalf("fresh read: record %d is %.20q, want %.20q", i, r.Line, want)
		}
	}
}

// dup gives the forwarder, which closes its directory fds, its own.
func dup(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A FIFO or a symlink planted where a log file goes is neither followed
// nor blocked on: the lines are dropped and counted.
func TestPlantedFile(t *testing.T) {
	dir, dfd := openDir(t)
	if err := unix.Mkfifo(filepath.Join(dir, "f.log"), 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(target, filepath.Join(dir, "s.log")); err != nil {
		t.Fatal(err)
	}
	f := New("u", false, dup(t, dfd), -1)
	f.SetConsole(-1, -1)
	write(t, f, "f", Stdout, "", "a\nb\n")
	write(t, f, "s", Stderr, "", "c\n")
	f.Close(5 * time.Second)
	if f.Dropped("f") != 2 || f.Dropped("s") != 1 {
		t.Errorf("dropped %d and %d, want 2 and 1", f.Dropped("f"), f.Dropped("s"))
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the symlink was followed")
	}
	if _, _, err := ReadApp(dfd, "f", Cursor{}); err == nil {
		t.Error("ReadApp read a FIFO")
	}
}

// teeRec records what a Tee is given.
type teeRec struct {
	b      bytes.Buffer
	closed chan struct{}
}

func (r *teeRec) Write(b []byte) { r.b.Write(b) }
func (r *teeRec) Close()         { close(r.closed) }

// A tee gets the stream's bytes as written, and is closed once, when the
// stream ends.
func TestTee(t *testing.T) {
	f := New("u", false, -1, -1)
	f.SetConsole(-1, -1)
	r := &teeRec{closed: make(chan struct{})}
	w, err := f.PipeTee("a", Stdout, "", r)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"Enter text:", "\nmore\n"} {
		if _, err := w.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	select {
	case <-r.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the tee was not closed at the stream's end")
	}
	if got := r.b.String(); got != "Enter text:\nmore\n" {
		t.Errorf("tee got %q", got)
	}
	f.Close(time.Second)
}

// The console is one file when its stdout and stderr are the same file,
// through one descriptor or two opens of it; two pipes, /dev/null (no
// order to keep), a missing stream, or no console at all are not.
func TestConsoleIsOne(t *testing.T) {
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	defer w1.Close()
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	defer w2.Close()
	p := filepath.Join(t.TempDir(), "console")
	a, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(m)
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	for _, c := range []struct {
		name         string
		stdout, errs int
		want         bool
	}{
		{"a terminal", int(tty.Fd()), int(tty.Fd()), true},
		{"one pipe", int(w1.Fd()), int(w1.Fd()), true},
		{"one file opened twice", int(a.Fd()), int(b.Fd()), true},
		{"two pipes", int(w1.Fd()), int(w2.Fd()), false},
		{"/dev/null", int(null.Fd()), int(null.Fd()), false},
		{"no stderr", int(w1.Fd()), -1, false},
		{"none", -1, -1, false},
	} {
		f := New("u", false, -1, -1)
		f.SetConsole(c.stdout, c.errs)
		if got := f.ConsoleIsOne(); got != c.want {
			t.Errorf("%s: ConsoleIsOne %v, want %v", c.name, got, c.want)
		}
	}
}

// The console's lines in rkt's format: "<app>[<pid>]: <line>", a line
// split across writes joined, a line longer than lineMax in pieces, a last
// line without a newline given one, "<app>: " when no pid is known, and
// the lines of two apps writing at once never mixed.
func TestConsolePrefixed(t *testing.T) {
	cr, cw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	got := make(chan string, 1)
	go func() { b, _ := io.ReadAll(cr); got <- string(b) }()
	f := New("u", false, -1, -1)
	f.SetConsole(int(cw.Fd()), int(cw.Fd()))
	f.SetConsolePrefixed(true)

	run := f.BeginRun("web")
	w, err := f.Pipe("web", Stdout, "")
	if err != nil {
		t.Fatal(err)
	}
	run.SetPid(7)
	long := strings.Repeat("x", lineMax+100)
	for _, s := range []string{"a\nbb", "c\n", long + "\n", "tail"} {
		if _, err := w.WriteString(s); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.Close()
	f.Close(5 * time.Second)

	h := New("u", false, -1, -1)
	h.SetConsole(int(cw.Fd()), int(cw.Fd()))
	h.SetConsolePrefixed(true)
	h.BeginRun("web").SetPid(0)
	w, err = h.Pipe("web", Stderr, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("no pid\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	h.Close(5 * time.Second)

	want := "web[7]: a\nweb[7]: bbc\nweb[7]: " + long[:lineMax] + "\nweb[7]: " + long[lineMax:] + "\nweb[7]: tail\nweb: no pid\n"
	// Two apps at once: their lines whole, each app's in order.
	g := New("u", false, -1, -1)
	g.SetConsole(int(cw.Fd()), int(cw.Fd()))
	g.SetConsolePrefixed(true)
	var ws []*os.File
	for i, app := range []string{"one", "two"} {
		g.BeginRun(app).SetPid(10 + i)
		w, err := g.Pipe(app, Stdout, "")
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	done := make(chan struct{})
	for i, w := range ws {
		go func() {
			defer func() { done <- struct{}{} }()
			line := strings.Repeat(strconv.Itoa(i), 3000)
			for n := range 300 {
				fmt.Fprintf(w, "%d %s\n", n, line)
			}
			w.Close()
		}()
	}
	<-done
	<-done
	g.Close(5 * time.Second)
	cw.Close()
	out := <-got
	if !strings.HasPrefix(out, want) {
		i := 0
		for i < len(out) && i < len(want) && out[i] == want[i] {
			i++
		}
		t.Fatalf("console differs at byte %d: %.80q, want %.80q", i, out[i:], want[i:])
	}
	next := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(out[len(want):], "\n"), "\n") {
		app, rest, ok := strings.Cut(l, ": ")
		digit := map[string]string{"one[10]": "0", "two[11]": "1"}[app]
		num, body, _ := strings.Cut(rest, " ")
		if !ok || digit == "" || num != strconv.Itoa(next[app]) || body != strings.Repeat(digit, 3000) {
			t.Fatalf("a mixed or misordered line: %.80q", l)
		}
		next[app]++
	}
	if next["one[10]"] != 300 || next["two[11]"] != 300 {
		t.Errorf("lines: %v", next)
	}
}
