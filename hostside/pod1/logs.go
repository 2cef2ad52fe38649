package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/podlog"
)

const logsUsage = `usage: pod1 logs [--app=NAME] [--follow] [--since=WHEN] [--escape=auto|always|never] UUID

Prints the output lines of the pod's apps, from the host's journal or, on a
host without one, from the pod's log files; also after the pod has exited,
until it is garbage-collected. Each line is prefixed with its app's name
unless --app selects one app. --follow keeps printing new lines until the
pod has exited. --since takes a duration (10m: that long ago) or an RFC 3339
time. UUID may be a unique prefix. On a terminal, control characters (but
tab) and bytes that are not UTF-8 are shown as \xNN, so that an app cannot
drive the terminal; into a pipe or a file the lines are as the app wrote
them. --escape=always or never says so whatever the output is.

flags:`

// journalctlTimeout bounds a journalctl run that does not follow.
const journalctlTimeout = time.Minute

// followInterval is how often --follow looks for new lines in the files
// and whether the pod is still running.
const followInterval = 200 * time.Millisecond

// cmdLogs implements `pod1 logs`.
func cmdLogs(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("logs")
	g.register(fs)
	app := fs.String("app", "", "only this app's lines")
	follow := fs.Bool("follow", false, "print new lines until the pod exits")
	sinceArg := fs.String("since", "", "only lines since then: a duration ago, or an RFC 3339 time")
	escapeArg := fs.String("escape", "auto", "show control characters as \\xNN: auto (on a terminal), always or never")
	if code, done := parseCommand(fs, args, logsUsage, stdout, stderr, "pod1 logs"); done {
		return code
	}
	var escape bool
	switch *escapeArg {
	case "auto":
		escape = isTerminal(stdout)
	case "always":
		escape = true
	case "never":
	default:
		fail(stderr, "pod1 logs", fmt.Errorf("--escape=%q: want auto, always or never", *escapeArg))
		return exitError
	}
	if fs.NArg() != 1 {
		fail(stderr, "pod1 logs", errors.New("want exactly one UUID"))
		return exitError
	}
	since, err := parseSince(*sinceArg, time.Now())
	if err != nil {
		fail(stderr, "pod1 logs", err)
		return exitError
	}
	p, err := findPod(g, fs.Arg(0))
	if err != nil {
		fail(stderr, "pod1 logs", err)
		return exitError
	}
	dirfd, err := podlog.OpenDir(p.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fail(stderr, "pod1 logs", fmt.Errorf("log directory: %w", err))
		return exitError
	}
	if dirfd >= 0 {
		defer unix.Close(dirfd)
	}
	// An app removed from a mutable pod has no entry in the manifest any
	// more, but its log file stays.
	if *app != "" && !hasApp(p, *app) && !hasLogFile(dirfd, *app) {
		fail(stderr, "pod1 logs", fmt.Errorf("pod %s has no app %q", p.UUID, *app))
		return exitError
	}
	running := func() bool {
		q, err := pods.Read(g.dir, p.UUID)
		return err == nil && q.State == pods.Running
	}
	w := &lineWriter{bufio.NewWriter(stdout), escape}
	if dirfd < 0 {
		var n int
		n, err = logsFromJournal(w, p.UUID, *app, since, *follow, running)
		if err == nil && n == 0 {
			err = checkKeptLogs(p.UUID)
		}
	} else {
		err = logsFromFiles(w, dirfd, *app, since, *follow, running)
	}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		fail(stderr, "pod1 logs", err)
		return exitError
	}
	return 0
}

func hasApp(p *pods.Pod, name string) bool {
	for _, a := range p.Apps {
		if a.Name == name {
			return true
		}
	}
	return false
}

func hasLogFile(dirfd int, app string) bool {
	if dirfd < 0 {
		return false
	}
	apps, err := podlog.Apps(dirfd)
	return err == nil && slices.Contains(apps, app)
}

func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since=%q: a duration must not be negative", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since=%q: want a duration (10m) or an RFC 3339 time", s)
	}
	return t, nil
}

// lineWriter prints the apps' lines, escaped for a terminal or not.
type lineWriter struct {
	*bufio.Writer
	escape bool
}

// printLine prints one line; write errors surface at the next Flush.
func printLine(w *lineWriter, app, only string, line []byte) {
	if only == "" {
		_, _ = w.WriteString(app + ": ")
	}
	if w.escape {
		writeEscaped(w.Writer, line)
	} else {
		_, _ = w.Write(line)
	}
	_ = w.WriteByte('\n')
}

// isTerminal reports whether w is a terminal: the administrator's, which
// an app's escape sequences could retitle, clear or type into.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// writeEscaped writes line with what a terminal would act on made
// visible: C0 controls but tab, DEL, C1 controls (U+0080-U+009F; also
// 8-bit CSI and OSC on terminals that take them), bytes that are not
// UTF-8, and the Unicode format characters that reorder or break what is
// shown (bidirectional overrides and isolates, line and paragraph
// separators), each as \xNN per byte. Anything else, a backslash
// included, is printed as it is: journalctl shows it so too.
func writeEscaped(w *bufio.Writer, line []byte) {
	const hex = "0123456789abcdef"
	esc := func(b []byte) {
		for _, c := range b {
			_, _ = w.Write([]byte{'\\', 'x', hex[c>>4], hex[c&15]})
		}
	}
	for len(line) > 0 {
		c := line[0]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' || c == 0x7f {
				esc(line[:1])
			} else {
				_ = w.WriteByte(c)
			}
			line = line[1:]
			continue
		}
		r, n := utf8.DecodeRune(line)
		switch {
		case r == utf8.RuneError && n == 1,
			r >= 0x80 && r <= 0x9f,
			r == 0x2028 || r == 0x2029,
			r >= 0x202a && r <= 0x202e,
			r >= 0x2066 && r <= 0x2069:
			esc(line[:n])
		default:
			_, _ = w.Write(line[:n])
		}
		line = line[n:]
	}
}

// logsFromFiles prints the records of the log files, merged by time.
func logsFromFiles(w *lineWriter, dirfd int, only string, since time.Time, follow bool, running func() bool) error {
	curs := map[string]podlog.Cursor{}
	for {
		// Whether the pod runs is known before the read, so a final
		// read follows the pod's end and misses nothing.
		live := follow && running()
		apps := []string{only}
		if only == "" {
			var err error
			if apps, err = podlog.Apps(dirfd); err != nil {
				return err
			}
		}
		var all []podlog.Record
		for _, a := range apps {
			recs, cur, err := podlog.ReadApp(dirfd, a, curs[a])
			if err != nil {
				return fmt.Errorf("app %q: %w", a, err)
			}
			curs[a] = cur
			all = append(all, recs...)
		}
		sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
		for _, r := range all {
			if r.Time.Before(since) {
				continue
			}
			printLine(w, r.App, only, r.Line)
		}
		if !live {
			return nil
		}
		if err := w.Flush(); err != nil {
			return err
		}
		time.Sleep(followInterval)
	}
}

// journalEntry is the part of journalctl's JSON output we print.
type journalEntry struct {
	Message json.RawMessage `json:"MESSAGE"`
	App     string          `json:"POD1_APP"`
	Cursor  string          `json:"__CURSOR"`
}

// message decodes MESSAGE: journalctl writes a string, or an array of
// bytes when it is not valid UTF-8.
func (e *journalEntry) message() []byte {
	var s string
	if json.Unmarshal(e.Message, &s) == nil {
		return []byte(s)
	}
	var b []byte
	var ints []int
	if json.Unmarshal(e.Message, &ints) == nil {
		for _, i := range ints {
			b = append(b, byte(i))
		}
	}
	return b
}

// logsFromJournal prints the pod's entries through journalctl. Following,
// journalctl -f runs while the pod does; once it has exited, one more run
// prints what came after the last entry seen.
// checkKeptLogs tells a pod that kept no logs from one whose apps wrote
// nothing that was asked for: with no log directory, the journal has no
// entry of the pod at all. Either its apps wrote nothing, or its stage1
// kept no logs (pod1's before 2026-12-01, whose pods may run on after an
// upgrade): printing nothing and succeeding would say the apps wrote
// nothing.
func checkKeptLogs(uuid string) error {
	ctx, cancel := context.WithTimeout(context.Background(), journalctlTimeout)
	defer cancel()
	w := &lineWriter{bufio.NewWriter(io.Discard), false}
	n, _, err := journalctl(ctx, w, "", []string{"--no-pager", "--quiet", "--output=json", "--lines=1", "POD1_POD_UUID=" + uuid}, false)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("pod %s has no logs: no log files in its directory and no entry in the journal (its apps wrote nothing, or its stage1 kept none: pod1's before 2026-12-01 did not)", uuid)
	}
	return nil
}

// logsFromJournal prints the pod's lines from the journal and returns how
// many journal entries it printed.
func logsFromJournal(w *lineWriter, uuid, only string, since time.Time, follow bool, running func() bool) (int, error) {
	args := []string{"--no-pager", "--quiet", "--output=json", "POD1_POD_UUID=" + uuid}
	if only != "" {
		args = append(args, "POD1_APP="+only)
	}
	if !since.IsZero() {
		args = append(args, "--since=@"+strconv.FormatInt(since.Unix(), 10))
	}
	cursor, total := "", 0
	if follow && running() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer cancel()
			for running() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(followInterval):
				}
			}
		}()
		var err error
		total, cursor, err = journalctl(ctx, w, only, append(args, "--follow", "--lines=all"), true)
		cancel()
		<-done
		if err != nil {
			return total, err
		}
	}
	if cursor != "" {
		args = append(args, "--after-cursor="+cursor)
	}
	ctx, cancel := context.WithTimeout(context.Background(), journalctlTimeout)
	defer cancel()
	n, _, err := journalctl(ctx, w, only, args, false)
	return total + n, err
}

// journalctl runs journalctl with args and prints the lines of the
// entries it gives; it returns how many entries and the last one's cursor.
func journalctl(ctx context.Context, w *lineWriter, only string, args []string, following bool) (int, string, error) {
	cmd := exec.CommandContext(ctx, "journalctl", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, "", err
	}
	var errBuf limitedBuffer
	cmd.Stderr = &errBuf
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return 0, "", fmt.Errorf("journalctl: %w", err)
	}
	cursor, n := "", 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e journalEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		// An entry holds several lines when the journal was behind
		// (podlog sends lines together then): one line each.
		for _, l := range bytes.Split(e.message(), []byte{'\n'}) {
			printLine(w, e.App, only, l)
		}
		cursor = e.Cursor
		n++
		if following {
			if err := w.Flush(); err != nil {
				return n, cursor, err
			}
		}
	}
	err = cmd.Wait()
	if following && ctx.Err() != nil {
		return n, cursor, nil
	}
	if err != nil {
		return n, cursor, fmt.Errorf("journalctl: %w: %s", err, errBuf.String())
	}
	return n, cursor, nil
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 4096 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
