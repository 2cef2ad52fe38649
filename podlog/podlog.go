// Package podlog carries the apps' output out of the pod: PID 1 reads each
// app's stdout and stderr from pipes and copies every byte to the console
// of the run entry point (rkt run's stdout and stderr), and every line to
// the host's journal when one listens, else to a size-capped file per app
// in the pod directory, and to the app's CRI log file when the pod uses
// rkt's k8s-plain log mode. It also owns the file names and the line
// format the host tools read back (pod1 logs).
//
// No app ever waits for a log sink: the journal is fed through a bounded
// queue, and what does not fit, or what the journal refuses, is dropped
// and counted per app. Only the console is written as the app wrote it,
// in order and without loss, as when the app held it itself.
package podlog

import (
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// MaxFileSize caps one log file; at the cap it becomes "<app>.log.1"
// (replacing the previous one) and a new file starts, so an app keeps at
// most twice this much.
const MaxFileSize = 4 << 20

// lineMax is the longest line carried as one record; a longer one is cut
// into records of this size, the CRI format's partial ("P") lines.
const lineMax = 16 << 10

// Journal queue bounds: lines waiting for the journal beyond these are
// dropped (and counted), so a stalled journal costs memory only up to
// here.
const (
	journalQueueLen   = 16384
	journalQueueBytes = 4 << 20
	// journalStall is how long the journal may take no line at all,
	// once the pod is over, before what is left is given up on.
	journalStall = 500 * time.Millisecond
)

// Stream numbers are the app's descriptors.
const (
	Stdout = 1
	Stderr = 2
)

// StreamName is the CRI name of a stream.
func StreamName(stream int) string {
	if stream == Stderr {
		return "stderr"
	}
	return "stdout"
}

// Forwarder carries the output of every app of one pod.
type Forwarder struct {
	uuid    string
	journal *journalQueue
	// dir and cri are directory fds (the pod's log directory, the CRI
	// log directory), -1 when unused.
	dir, cri int
	// console are the descriptors each stream's bytes are copied to
	// (-1: none).
	console [3]int
	// criKubelet writes the CRI files in kubelet's tagged format
	// instead of rkt's.
	criKubelet bool
	// prefixed: the console gets each line as "<app>[<pid>]: <line>\n"
	// (SetConsolePrefixed), not the bytes as they come.
	prefixed bool
	// consoleMu[stream] serializes the console's line writes, one lock
	// for both streams when they are one file, so that lines of
	// different apps never mix within a line.
	consoleMu [3]*sync.Mutex
	mu        sync.Mutex
	apps      map[string]*appLog
	streams   sync.WaitGroup
	syslog    syslogState
}

// New returns the pod's forwarder. dir and cri are open directory fds it
// takes over (-1: none); toJournal sends every line to the journal.
func New(uuid string, toJournal bool, dir, cri int) *Forwarder {
	f := newForwarder(uuid, dir, cri)
	if toJournal {
		f.journal = newJournalQueue(true, nil)
	}
	return f
}

// NewWithPodJournal is New whose lines also go to the pod's own journal
// (PodJournal), whose directory it takes over. Without it (its ids are
// not ids), the forwarder is New's, and the error says why.
func NewWithPodJournal(uuid string, toJournal bool, dir, cri int, pj PodJournal) (*Forwarder, error) {
	file, err := newPodJournal(pj)
	if err != nil {
		unix.Close(pj.Dir)
		return New(uuid, toJournal, dir, cri), err
	}
	f := newForwarder(uuid, dir, cri)
	f.journal = newJournalQueue(toJournal, file)
	return f, nil
}

func newForwarder(uuid string, dir, cri int) *Forwarder {
	f := &Forwarder{uuid: uuid, dir: dir, cri: cri, console: [3]int{-1, Stdout, Stderr}, apps: map[string]*appLog{}}
	mu := &sync.Mutex{}
	f.consoleMu = [3]*sync.Mutex{nil, mu, mu}
	return f
}

// SetConsole changes where the streams' bytes are copied: our stdout and
// stderr by default, -1 for nowhere. It must be called before Pipe.
func (f *Forwarder) SetConsole(stdout, stderr int) {
	f.console[Stdout], f.console[Stderr] = stdout, stderr
}

// SetConsolePrefixed makes the console line-based, in the format rkt's
// default stage1 prints its apps' output in (its journald forwards each
// line to the console so): "<app>[<pid>]: <line>\n", pid being the app's
// process as the app sees itself (Run.SetPid). A line is written once
// whole: at its newline, at lineMax bytes (a piece of a longer line is a
// line of its own), or when the stream ends without a newline (then with
// one added, so that the next line starts on a line of its own). The
// lines of one read reach the console in one write, under a lock per
// console file: the lines of every app and stream stay whole. It must be
// called before Pipe.
func (f *Forwarder) SetConsolePrefixed(on bool) {
	f.prefixed = on
	if on && !f.ConsoleIsOne() {
		f.consoleMu[Stderr] = &sync.Mutex{}
	}
}

// Run is one process of an app whose output the console prefixes with
// its pid: each run of the app, and each of its event handlers, has its
// own. The streams made after BeginRun are the run's.
type Run struct {
	pid   atomic.Int64
	known chan struct{}
	once  sync.Once
}

// runPidWait bounds how long a run's first line waits for its pid: the
// set-up process reports it as it clones the app's process, so it is
// there by the time the app writes, but for a set-up that never reports.
const runPidWait = time.Second

// SetPid gives the run's pid (0 or less: none, the set-up reported no
// process). Only the first call counts.
func (r *Run) SetPid(pid int) {
	if r == nil {
		return
	}
	r.once.Do(func() {
		r.pid.Store(int64(pid))
		close(r.known)
	})
}

// Pid is the run's pid, 0 if none is known; it waits a bounded while
// for SetPid.
func (r *Run) Pid() int {
	select {
	case <-r.known:
	case <-time.After(runPidWait):
	}
	return int(r.pid.Load())
}

// BeginRun starts a run of app: the streams Pipe and Carry make from now
// on prefix their console lines with its pid.
func (f *Forwarder) BeginRun(app string) *Run {
	r := &Run{known: make(chan struct{})}
	f.mu.Lock()
	a := f.app(app)
	a.run = r
	f.mu.Unlock()
	return r
}

// ConsoleIsOne reports whether the console's stdout and stderr are one
// file (a terminal, or "2>&1"): what an app writes to its stdout and
// stderr then lands in one place, where its order is the app's only if
// both streams come through one pipe. Two pipes read by two goroutines
// lose it: bytes written to stdout, then to stderr, are both waiting
// when PID 1 gets to them, and nothing says which came first. A device
// other than a terminal (/dev/null) keeps no order to lose.
func (f *Forwarder) ConsoleIsOne() bool {
	o, e := f.console[Stdout], f.console[Stderr]
	if o < 0 || e < 0 {
		return false
	}
	var so, se unix.Stat_t
	if unix.Fstat(o, &so) != nil || unix.Fstat(e, &se) != nil {
		return false
	}
	if so.Dev != se.Dev || so.Ino != se.Ino {
		return false
	}
	if so.Mode&unix.S_IFMT == unix.S_IFCHR {
		_, err := unix.IoctlGetTermios(o, unix.TCGETS)
		return err == nil
	}
	return true
}

// SetCRIFormat chooses the CRI files' format: kubelet's, with the F/P
// tag after the stream, or (the default) rkt v1.30.0's, without it. It
// must be called before Pipe.
func (f *Forwarder) SetCRIFormat(kubelet bool) { f.criKubelet = kubelet }

// appLog is one app's state across its runs.
type appLog struct {
	name    string
	dropped atomic.Uint64
	// consoleDropped counts the bytes of output the console (the
	// stage1's stdout or stderr) did not take: it went away, or stayed
	// full past writeAll's bound. They reached the other sinks.
	consoleDropped atomic.Uint64
	// syslogDropped counts the messages to its /dev/log the rate
	// limit dropped.
	syslogDropped atomic.Uint64
	// jhdr are the journal fields of each stream but the message, in
	// the native protocol's form.
	jhdr [3][]byte
	// refs counts its open streams; the files are open while it is
	// positive (under Forwarder.mu).
	refs int
	// mu orders the two streams' records in the files.
	mu   sync.Mutex
	file *rotatingFile
	cri  *rotatingFile
	// run is the current run (BeginRun), nil before the first; under
	// Forwarder.mu.
	run *Run
}

// counter reads one of app's counters, 0 for an app it never saw.
func (f *Forwarder) counter(app string, c func(*appLog) *atomic.Uint64) uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	a := f.apps[app]
	f.mu.Unlock()
	if a == nil {
		return 0
	}
	return c(a).Load()
}

// Dropped returns how many lines of app no sink could take.
func (f *Forwarder) Dropped(app string) uint64 {
	return f.counter(app, func(a *appLog) *atomic.Uint64 { return &a.dropped })
}

// ConsoleDropped returns how many bytes of app's output the console did
// not take.
func (f *Forwarder) ConsoleDropped(app string) uint64 {
	return f.counter(app, func(a *appLog) *atomic.Uint64 { return &a.consoleDropped })
}

// Tee receives a copy of a stream's bytes as they arrive (rkt attach's
// clients). Write is called from the stream's reader and must not block
// nor keep b; Close is called once, when the stream has ended.
type Tee interface {
	Write(b []byte)
	Close()
}

// Pipe makes a pipe for one stream of one run of app and starts carrying
// what arrives on it. The caller hands the returned write end to the app
// and closes its own copy; the stream ends when every copy is closed.
// criPath names the app's CRI log file ("" for none).
func (f *Forwarder) Pipe(app string, stream int, criPath string) (*os.File, error) {
	return f.PipeTee(app, stream, criPath, nil)
}

// PipeTee is Pipe whose bytes also go to tee (nil: none).
func (f *Forwarder) PipeTee(app string, stream int, criPath string, tee Tee) (*os.File, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	// Only our end is non-blocking (it is its own open file
	// description): the app writes to a plain blocking pipe, as to any
	// other.
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, err
	}
	f.Carry(app, stream, criPath, p[0], tee)
	return os.NewFile(uintptr(p[1]), app+"-"+StreamName(stream)), nil
}

// Carry carries what is read from fd, a non-blocking descriptor it takes
// over (a pipe's read end, a pseudo-terminal's master), as one stream of
// app, until it ends (EOF, or EIO once a terminal's last user is gone).
func (f *Forwarder) Carry(app string, stream int, criPath string, fd int, tee Tee) {
	r := os.NewFile(uintptr(fd), app+"-"+StreamName(stream))
	a, run := f.acquire(app, criPath)
	f.streams.Add(1)
	go f.carry(a, stream, r, tee, run)
}

// acquire returns app's state with its files open, and its current run.
func (f *Forwarder) acquire(app, criPath string) (*appLog, *Run) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.app(app)
	// Each file is opened by the first stream that needs it: the app's
	// /dev/log, served for the app's life, needs no CRI file, and the
	// app's stdout, which comes after, does.
	a.mu.Lock()
	if f.dir >= 0 && (a.file == nil || a.file.fd < 0) {
		a.file = openRotating(f.dir, FileName(app), MaxFileSize)
	}
	if f.cri >= 0 && criPath != "" && (a.cri == nil || a.cri.fd < 0) {
		a.cri = openRotating(f.cri, criPath, 0)
	}
	a.mu.Unlock()
	a.refs++
	return a, a.run
}

// app returns app's state, made on first use (under f.mu).
func (f *Forwarder) app(app string) *appLog {
	a := f.apps[app]
	if a == nil {
		a = &appLog{name: app}
		for _, s := range []int{Stdout, Stderr} {
			a.jhdr[s] = journalHeader(s, map[string]string{
				"SYSLOG_IDENTIFIER": app,
				"POD1_POD_UUID":     f.uuid,
				"POD1_APP":          app,
				"POD1_STREAM":       StreamName(s),
			})
		}
		f.apps[app] = a
	}
	return a
}

func (f *Forwarder) release(a *appLog) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a.refs--
	if a.refs > 0 {
		return
	}
	a.mu.Lock()
	a.file.close()
	a.cri.close()
	a.file, a.cri = nil, nil
	a.mu.Unlock()
}

// carry reads one stream to its end: the bytes as they come to the
// console, the lines to the sinks. A last line without a newline is
// carried when the stream ends, as a partial line: no newline follows
// it, and kubelet, which appends one to full lines only, gives back the
// bytes the app wrote.
func (f *Forwarder) carry(a *appLog, stream int, r *os.File, tee Tee, run *Run) {
	defer f.streams.Done()
	defer f.release(a)
	defer r.Close()
	if tee != nil {
		defer tee.Close()
	}
	// Small at first (PID 1's memory is the pod's overhead), grown up
	// to lineMax when a line does not fit.
	buf := make([]byte, 2<<10)
	rec := make([]byte, 0, 128)
	// The console's prefix, made at the stream's first line, and the
	// lines of one read, written together: one write per read, as the
	// raw console has, not one per line.
	var prefix, cbuf []byte
	console := func(b []byte) {
		if !f.prefixed || f.console[stream] < 0 {
			return
		}
		if prefix == nil {
			prefix = consolePrefix(a.name, run)
		}
		cbuf = append(append(append(cbuf, prefix...), b...), '\n')
	}
	flush := func() {
		if len(cbuf) == 0 {
			return
		}
		// Under the console's lock, whole: another stream's lines
		// come before or after, never within.
		mu := f.consoleMu[stream]
		mu.Lock()
		lost := writeAll(f.console[stream], cbuf)
		mu.Unlock()
		if lost > 0 {
			a.consoleDropped.Add(uint64(lost))
		}
		// A flood's buffer is not kept for a quiet stream.
		if cap(cbuf) > lineMax+len(prefix)+1 {
			cbuf = nil
		}
		cbuf = cbuf[:0]
	}
	n := 0
	for {
		m, err := r.Read(buf[n:])
		if m > 0 {
			if fd := f.console[stream]; fd >= 0 && !f.prefixed {
				if lost := writeAll(fd, buf[n:n+m]); lost > 0 {
					a.consoleDropped.Add(uint64(lost))
				}
			}
			if tee != nil {
				tee.Write(buf[n : n+m])
			}
			n += m
			now := time.Now()
			start := 0
			for i := start; i < n; i++ {
				if buf[i] == '\n' {
					console(buf[start:i])
					rec = f.line(a, stream, buf[start:i], false, now, rec)
					start = i + 1
				}
			}
			// A read that filled the buffer means output waits in the
			// pipe: a bigger buffer takes it in fewer reads. It grows
			// up to lineMax, as it does for a line that does not fit.
			full := n == len(buf)
			switch {
			case start == 0 && full && n == lineMax:
				console(buf[:n])
				rec = f.line(a, stream, buf[:n], true, now, rec)
				n = 0
			case start > 0:
				n = copy(buf, buf[start:n])
			}
			if full && len(buf) < lineMax {
				buf = append(buf, make([]byte, min(len(buf), lineMax-len(buf)))...)
			}
			flush()
		}
		if err != nil {
			if n > 0 {
				console(buf[:n])
				flush()
				f.line(a, stream, buf[:n], true, time.Now(), rec)
			}
			return
		}
	}
}

// consolePrefix is "<app>[<pid>]: ", or "<app>: " for output of no known
// process of the app (its set-up's words when it could not start it, or
// an app gone before PID 1 read its pid).
func consolePrefix(app string, run *Run) []byte {
	pid := 0
	if run != nil {
		pid = run.Pid()
	}
	b := append([]byte(nil), app...)
	if pid > 0 {
		b = append(append(append(b, '['), strconv.Itoa(pid)...), ']')
	}
	return append(b, ": "...)
}

// line hands one line (without its newline) to the sinks. partial marks
// bytes no newline follows: a piece of a line longer than lineMax, or
// the last bytes of a stream that ended without a newline. rec is
// scratch space, returned for reuse.
func (f *Forwarder) line(a *appLog, stream int, b []byte, partial bool, now time.Time, rec []byte) []byte {
	if f.journal != nil && !f.journal.put(b, a.jhdr[stream], a) {
		a.dropped.Add(1)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.file == nil && a.cri == nil {
		return rec
	}
	failed := false
	if a.file != nil {
		rec = AppendRecord(rec[:0], now, stream, partial, b)
		failed = a.file.write(rec) != nil
	}
	if a.cri != nil {
		if f.criKubelet {
			rec = AppendRecord(rec[:0], now, stream, partial, b)
		} else {
			rec = AppendCRIRecord(rec[:0], now, stream, b)
		}
		failed = a.cri.write(rec) != nil || failed
	}
	if failed {
		a.dropped.Add(1)
	}
	return rec
}

// AppendCRIRecord appends one line as rkt's stage1 writes it to a CRI log
// file (rkt v1.30.0's iottymux, the format of the kubelets of its day):
// "<RFC 3339 time, nanoseconds> <stdout|stderr> <line>\n", here in UTC.
// A piece of a line longer than lineMax is a line of its own.
func AppendCRIRecord(dst []byte, t time.Time, stream int, line []byte) []byte {
	dst = t.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, ' ')
	dst = append(dst, StreamName(stream)...)
	dst = append(dst, ' ')
	dst = append(dst, line...)
	return append(dst, '\n')
}

// AppendRecord appends one line in the CRI log format kubelet reads:
// "<RFC 3339 time, UTC, nanoseconds> <stdout|stderr> <F|P> <line>\n".
// F is a full line, whose newline kubelet gives back; P (partial) is
// bytes no newline follows, which kubelet joins to the next record.
func AppendRecord(dst []byte, t time.Time, stream int, partial bool, line []byte) []byte {
	dst = t.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, ' ')
	dst = append(dst, StreamName(stream)...)
	if partial {
		dst = append(dst, " P "...)
	} else {
		dst = append(dst, " F "...)
	}
	dst = append(dst, line...)
	return append(dst, '\n')
}

// appendRecordPrefix appends what comes before the line in a full
// line's record (AppendRecord).
func appendRecordPrefix(dst []byte, t time.Time, stream int) []byte {
	dst = t.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, ' ')
	dst = append(dst, StreamName(stream)...)
	return append(dst, " F "...)
}

// writeAll writes b to our descriptor fd (the console), whole: raw
// writes, so that a console that went away (EPIPE) is an error here and
// never a SIGPIPE death of PID 1. It returns how many bytes of b the
// console did not take (counted in the app's record, never silent).
func writeAll(fd int, b []byte) int {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			// Someone made the console non-blocking: wait for
			// room, a bounded while.
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			if k, _ := unix.Poll(pfd, 1000); k <= 0 {
				return len(b)
			}
			continue
		case err != nil || n <= 0:
			return len(b)
		}
		b = b[n:]
	}
	return 0
}

// Close waits, at most timeout, for every stream to end (the caller has
// ended every process that could hold a write end) and for the journal
// to take what is queued, as long as it takes some; what it could not
// take counts as dropped. The directory fds are closed.
func (f *Forwarder) Close(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	f.endAllSyslog()
	done := make(chan struct{})
	go func() { f.streams.Wait(); close(done) }()
	ended := false
	select {
	case <-done:
		ended = true
	case <-time.After(timeout):
	}
	if f.journal != nil {
		f.journal.finish(ended, time.Until(deadline))
	}
	for _, fd := range []int{f.dir, f.cri} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	f.dir, f.cri = -1, -1
}

// FileName is app's current log file in layout.LogDir.
func FileName(app string) string { return app + ".log" }

// OldFileName is app's previous log file in layout.LogDir.
func OldFileName(app string) string { return app + ".log.1" }

// rotatingFile appends records to a file in a directory fd; with a max
// size, the file is renamed to its ".1" name when the next record would
// pass it.
type rotatingFile struct {
	dir  int
	name string
	fd   int
	size int64
	max  int64
}

func openRotating(dir int, name string, max int64) *rotatingFile {
	w := &rotatingFile{dir: dir, name: name, fd: -1, max: max}
	w.open(unix.O_APPEND)
	return w
}

// open opens the file without following a symlink; O_NONBLOCK, which
// changes nothing for a regular file, makes a FIFO planted in its place
// fail at once instead of blocking, and the fstat refuses it.
func (w *rotatingFile) open(flags int) {
	fd, err := unix.Openat(w.dir, w.name, flags|unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o640)
	if err != nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return
	}
	w.fd, w.size = fd, st.Size
}

func (w *rotatingFile) write(b []byte) error {
	if w.fd < 0 {
		return errNotOpen
	}
	if w.max > 0 && w.size > 0 && w.size+int64(len(b)) > w.max {
		unix.Close(w.fd)
		w.fd = -1
		if err := unix.Renameat(w.dir, w.name, w.dir, w.name+".1"); err != nil {
			return err
		}
		w.open(unix.O_TRUNC)
		if w.fd < 0 {
			return errNotOpen
		}
	}
	n, err := unix.Write(w.fd, b)
	if n > 0 {
		w.size += int64(n)
	}
	if err == nil && n < len(b) {
		err = unix.ENOSPC
	}
	return err
}

func (w *rotatingFile) close() {
	if w != nil && w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

var errNotOpen = errors.New("log file not open")

// ParseRecord splits a record written by AppendRecord (without its
// newline): its time, stream, whether it is a partial line, and the line.
func ParseRecord(rec []byte) (t time.Time, stream string, partial bool, line []byte, ok bool) {
	sp := func(b []byte) ([]byte, []byte, bool) {
		for i, c := range b {
			if c == ' ' {
				return b[:i], b[i+1:], true
			}
		}
		return nil, nil, false
	}
	ts, rest, ok1 := sp(rec)
	st, rest, ok2 := sp(rest)
	tag, rest, ok3 := sp(rest)
	if !ok1 || !ok2 || !ok3 || (string(st) != "stdout" && string(st) != "stderr") || (string(tag) != "F" && string(tag) != "P") {
		return t, "", false, nil, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return t, "", false, nil, false
	}
	return t, string(st), string(tag) == "P", rest, true
}
