package podlog

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Every app's /dev/log is a datagram socket of its own that PID 1 reads:
// the socket a message arrives on names its app, whatever the message
// says, so no app can log as another. Its lines go where the app's output
// goes, the journal or the app's log file, with the priority and the
// identifier of the message's syslog header.

// SocketName is the name of an app's socket in its directory.
const SocketName = "log"

// syslogMax is the longest message carried; the rest of a longer
// datagram is cut (glibc's syslog sends up to a page or so; RFC 5424's
// receivers must take 2 KiB).
const syslogMax = 8 << 10

// An app's messages are limited to syslogRate a second, with bursts of up
// to syslogBurst: what comes faster is read and dropped, counted, and the
// count logged once the app's messages fit again. PID 1's memory is the
// kernel's socket queue plus a buffer per app whatever the rate, and a
// flood costs the other apps neither their share of the journal's queue
// nor their lines.
const (
	syslogRate  = 1000
	syslogBurst = 2000
)

// syslogDrain is how long the last messages are read for when an app's
// socket is closed: what its (ended) processes sent before is queued.
const syslogDrain = 100 * time.Millisecond

// Default priority of a message without a header: user.info, as journald
// gives one.
const defaultPriority = 1<<3 | 6

// syslogSock is one app's /dev/log as PID 1 reads it.
type syslogSock struct {
	SyslogSocket
	// tokens are the messages the app may send now (rate limit), at
	// last; suppressed counts those dropped since the last was taken.
	tokens     float64
	last       time.Time
	suppressed uint64
	// final: the pod is over and every process that could send is
	// gone (endAllSyslog): what is queued is read without waiting.
	final atomic.Bool
}

// syslogState is the forwarder's part for the apps' /dev/log.
type syslogState struct {
	mu    sync.Mutex
	socks map[string]*syslogSock
}

// SyslogSocket is an app's /dev/log socket, bound and not yet read.
type SyslogSocket struct {
	conn *net.UnixConn
	// Path is the socket's absolute path, as the set-up processes see
	// it; dir is its directory as PID 1 writes it.
	Path, dir string
}

// BindSyslog makes app's /dev/log socket in a directory of its own,
// <app>/log in dir: PID 1 makes it before the app's root is set up, whose
// /dev/log the set-up binds onto it. Only that bind reaches it: the
// directory is out of every app's root. seen is dir as the set-up
// processes name it, an absolute path (PID 1 may make it through another
// path to it: its root shows dir read-only). A Forwarder reads it once
// given it (ServeSyslog).
func BindSyslog(app, dir, seen string) (*SyslogSocket, error) {
	own := filepath.Join(dir, app)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// What a removed app of the same name left.
	if err := os.RemoveAll(own); err != nil {
		return nil, err
	}
	if err := os.Mkdir(own, 0o700); err != nil {
		return nil, err
	}
	dfd, err := unix.Open(own, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	// Through the directory's descriptor: a socket's address holds 108
	// bytes, fewer than a pod directory's path and an app's name.
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d/%s", dfd, SocketName), Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	// Every uid of the app's, which may be any of a user namespace's,
	// may send; no other process has a path to it.
	if err := unix.Fchmodat(dfd, SocketName, 0o666, 0); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &SyslogSocket{conn: c, Path: filepath.Join(seen, app, SocketName), dir: own}, nil
}

// ListenSyslog returns the path of app's /dev/log socket, made
// (BindSyslog) and served now if it is not yet.
func (f *Forwarder) ListenSyslog(app, dir, seen string) (string, error) {
	f.syslog.mu.Lock()
	sk := f.syslog.socks[app]
	f.syslog.mu.Unlock()
	if sk != nil {
		return sk.Path, nil
	}
	s, err := BindSyslog(app, dir, seen)
	if err != nil {
		return "", err
	}
	f.ServeSyslog(app, s)
	return s.Path, nil
}

// ServeSyslog reads app's messages from s, which it takes over, until
// the app is removed (EndSyslog) or the forwarder closed.
func (f *Forwarder) ServeSyslog(app string, s *SyslogSocket) {
	st := &f.syslog
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.socks == nil {
		st.socks = map[string]*syslogSock{}
	}
	if old := st.socks[app]; old != nil {
		_ = old.conn.SetReadDeadline(time.Now())
	}
	sk := &syslogSock{SyslogSocket: *s, tokens: syslogBurst, last: time.Now()}
	st.socks[app] = sk
	a, _ := f.acquire(app, "")
	f.streams.Add(1)
	go f.readSyslog(a, sk)
}

// EndSyslog stops serving app's /dev/log (the app is removed): the
// socket and its directory go at once, so that an app added again under
// the name gets a new one; what was sent before is still read.
func (f *Forwarder) EndSyslog(app string) {
	s := &f.syslog
	s.mu.Lock()
	sk := s.socks[app]
	delete(s.socks, app)
	s.mu.Unlock()
	if sk == nil {
		return
	}
	_ = os.RemoveAll(sk.dir)
	_ = sk.conn.SetReadDeadline(time.Now().Add(syslogDrain))
}

// endAllSyslog ends every app's /dev/log, at the pod's end: the messages
// queued are read, then the readers return.
func (f *Forwarder) endAllSyslog() {
	s := &f.syslog
	s.mu.Lock()
	defer s.mu.Unlock()
	for app, sk := range s.socks {
		// Every sender is dead by now (the pod's end): what it sent
		// is queued, and is read at once, not waited for.
		sk.final.Store(true)
		_ = sk.conn.SetReadDeadline(time.Now())
		delete(s.socks, app)
	}
}

// SyslogDropped returns how many of app's /dev/log messages the rate
// limit dropped.
func (f *Forwarder) SyslogDropped(app string) uint64 {
	return f.counter(app, func(a *appLog) *atomic.Uint64 { return &a.syslogDropped })
}

// readSyslog reads app's messages until its socket is ended.
func (f *Forwarder) readSyslog(a *appLog, sk *syslogSock) {
	defer f.streams.Done()
	defer f.release(a)
	defer func() { _ = sk.conn.Close() }()
	buf := make([]byte, syslogMax)
	rec := make([]byte, 0, 128)
	for {
		// Read, not ReadFrom: a sender's address would be an
		// allocation per message, and tells nothing the socket does
		// not.
		n, err := sk.conn.Read(buf)
		if err != nil && sk.final.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			// The deadline refuses a read before it is tried: what
			// is queued is read past it, without blocking.
			n, err = sk.readQueued(buf)
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) || errors.Is(err, unix.EAGAIN) {
				break
			}
			// Nothing a client can do makes a datagram read fail
			// for long; a failure is not a reason to spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		now := time.Now()
		if !sk.take(now) {
			a.syslogDropped.Add(1)
			continue
		}
		if sk.suppressed > 0 {
			rec = f.syslogSuppressed(a, sk.suppressed, now, rec)
			sk.suppressed = 0
		}
		rec = f.syslogLine(a, ParseSyslog(buf[:n]), now, rec)
	}
	if sk.suppressed > 0 {
		f.syslogSuppressed(a, sk.suppressed, time.Now(), rec)
	}
}

// readQueued reads one queued message without blocking: EAGAIN when
// none is left.
func (sk *syslogSock) readQueued(buf []byte) (int, error) {
	rc, err := sk.conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	cerr := rc.Control(func(fd uintptr) {
		for {
			n, _, err = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	})
	if cerr != nil {
		return 0, cerr
	}
	return n, err
}

// take spends a token of the rate limit, false (and counted as
// suppressed) when none is left.
func (sk *syslogSock) take(now time.Time) bool {
	sk.tokens = min(syslogBurst, sk.tokens+now.Sub(sk.last).Seconds()*syslogRate)
	sk.last = now
	if sk.tokens < 1 {
		sk.suppressed++
		return false
	}
	sk.tokens--
	return true
}

func (f *Forwarder) syslogSuppressed(a *appLog, n uint64, now time.Time, rec []byte) []byte {
	m := SyslogMsg{Priority: 1<<3 | 4, Ident: "pod1",
		Msg: fmt.Appendf(nil, "%d messages to /dev/log dropped: more than %d a second", n, syslogRate)}
	return f.syslogLine(a, m, now, rec)
}

// syslogLine hands one message to the sinks: the journal with its own
// fields, or the app's log file as lines "<facility>.<severity>
// <ident>[<pid>]: <message>", on the record's stderr for err and worse,
// else stdout, as the streams' priorities are in the journal.
func (f *Forwarder) syslogLine(a *appLog, m SyslogMsg, now time.Time, rec []byte) []byte {
	if f.journal != nil {
		hdr := m.journalHeader(f.uuid, a.name)
		if !f.journal.putOwned(m.Msg, hdr, a) {
			a.dropped.Add(1)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.file == nil {
		return rec
	}
	stream := Stdout
	if m.Priority&7 <= 3 {
		stream = Stderr
	}
	failed := false
	for rest := m.Msg; rest != nil; {
		l := rest
		rest = nil
		if i := bytes.IndexByte(l, '\n'); i >= 0 {
			l, rest = l[:i], l[i+1:]
		}
		rec = appendRecordPrefix(rec[:0], now, stream)
		rec = m.appendPrefix(rec)
		rec = append(append(rec, l...), '\n')
		failed = a.file.write(rec) != nil || failed
	}
	if failed {
		a.dropped.Add(1)
	}
	return rec
}

// SyslogMsg is a message as ParseSyslog reads it.
type SyslogMsg struct {
	// Priority is facility*8 + severity.
	Priority int
	// Ident is the sender's tag (RFC 3164) or APP-NAME (RFC 5424),
	// "" for none; Pid is its pid as it says, "" for none.
	Ident, Pid string
	Msg        []byte
}

var severities = [8]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

var facilities = [24]string{"kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
	"authpriv", "ftp", "ntp", "security", "console", "solaris-cron",
	"local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"}

// appendPrefix appends "<facility>.<severity> <ident>[<pid>]: " (the
// ident part only when the message has one).
func (m *SyslogMsg) appendPrefix(b []byte) []byte {
	b = append(b, facilities[m.Priority>>3]...)
	b = append(b, '.')
	b = append(b, severities[m.Priority&7]...)
	b = append(b, ' ')
	if m.Ident != "" {
		b = append(b, m.Ident...)
		if m.Pid != "" {
			b = append(b, '[')
			b = append(b, m.Pid...)
			b = append(b, ']')
		}
		b = append(b, ':', ' ')
	}
	return b
}

// journalHeader is the message's fields but MESSAGE: the identifier the
// message names (journald's for /dev/log, so journalctl -t works as it
// did in rkt's pods), or the app's name without one.
func (m *SyslogMsg) journalHeader(uuid, app string) []byte {
	ident := m.Ident
	if ident == "" {
		ident = app
	}
	b := appendJournalField(nil, "PRIORITY", strconv.Itoa(m.Priority&7))
	b = appendJournalField(b, "SYSLOG_FACILITY", strconv.Itoa(m.Priority>>3))
	b = appendJournalField(b, "SYSLOG_IDENTIFIER", ident)
	if m.Pid != "" {
		b = appendJournalField(b, "SYSLOG_PID", m.Pid)
	}
	b = appendJournalField(b, "POD1_POD_UUID", uuid)
	b = appendJournalField(b, "POD1_APP", app)
	return appendJournalField(b, "POD1_STREAM", "syslog")
}

// ParseSyslog reads a datagram sent to /dev/log: an RFC 3164 message
// ("<PRI>Mmm dd hh:mm:ss tag[pid]: text", what glibc's syslog and logger
// send), an RFC 5424 one ("<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD
// text"), or anything else, leniently: a part that is not there, or not
// as expected, is taken as the message's text. The timestamp and the
// host name are dropped (the receiver's time counts, and the host is
// the pod).
func ParseSyslog(b []byte) SyslogMsg {
	b = bytes.TrimRight(b, "\n\r\x00")
	m := SyslogMsg{Priority: defaultPriority}
	if p, rest, ok := parsePRI(b); ok {
		m.Priority, b = p, rest
	}
	if rest, ok := parse5424(b, &m); ok {
		m.Msg = rest
		return m
	}
	b = skip3164Time(b)
	m.Msg = b
	if id, pid, rest, ok := parseTag(b); ok {
		m.Ident, m.Pid, m.Msg = id, pid, rest
	}
	return m
}

// parsePRI reads "<N>", N from 0 to 191 in at most three digits.
func parsePRI(b []byte) (int, []byte, bool) {
	if len(b) < 3 || b[0] != '<' {
		return 0, b, false
	}
	n := 0
	for i := 1; i < len(b) && i <= 4; i++ {
		c := b[i]
		switch {
		case c == '>' && i > 1 && n <= 191:
			return n, b[i+1:], true
		case c >= '0' && c <= '9' && i <= 3:
			n = n*10 + int(c-'0')
		default:
			return 0, b, false
		}
	}
	return 0, b, false
}

// parse5424 reads the header after PRI of an RFC 5424 message: VERSION
// (one or two digits, not 0) and six fields, the last the structured
// data, and returns the text.
func parse5424(b []byte, m *SyslogMsg) ([]byte, bool) {
	i := 0
	for i < len(b) && i < 2 && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || b[0] == '0' || i >= len(b) || b[i] != ' ' {
		return nil, false
	}
	rest := b[i+1:]
	var f [5][]byte
	for k := range f {
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			return nil, false
		}
		f[k], rest = rest[:j], rest[j+1:]
	}
	switch {
	case bytes.HasPrefix(rest, []byte("-")):
		rest = rest[1:]
	case bytes.HasPrefix(rest, []byte("[")):
		var ok bool
		if rest, ok = skipSD(rest); !ok {
			return nil, false
		}
	default:
		return nil, false
	}
	if v := string(f[2]); v != "-" && printableToken(v) {
		m.Ident = v
	}
	if v := string(f[3]); v != "-" && printableToken(v) {
		m.Pid = v
	}
	rest = bytes.TrimPrefix(rest, []byte(" "))
	return bytes.TrimPrefix(rest, []byte("\xef\xbb\xbf")), true
}

// skipSD skips the structured data's elements ("[id k="v"]..."), a
// backslash escaping the next byte and quotes holding ']'; false if one
// is not closed.
func skipSD(b []byte) ([]byte, bool) {
	for len(b) > 0 && b[0] == '[' {
		quoted, i := false, 1
		for ; i < len(b); i++ {
			switch c := b[i]; {
			case c == '\\':
				i++
			case c == '"':
				quoted = !quoted
			case c == ']' && !quoted:
				goto next
			}
		}
		return nil, false
	next:
		b = b[i+1:]
	}
	return b, true
}

// skip3164Time skips a leading "Mmm dd hh:mm:ss " (RFC 3164) or an RFC
// 3339 time and a space.
func skip3164Time(b []byte) []byte {
	if len(b) >= 16 && b[3] == ' ' && b[6] == ' ' && b[9] == ':' && b[12] == ':' && b[15] == ' ' &&
		isAlpha(b[0]) && isAlpha(b[1]) && isAlpha(b[2]) {
		return b[16:]
	}
	if len(b) >= 20 && b[4] == '-' && b[7] == '-' && b[10] == 'T' && isDigit(b[0]) {
		if j := bytes.IndexByte(b, ' '); j > 0 {
			if _, err := time.Parse(time.RFC3339Nano, string(b[:j])); err == nil {
				return b[j+1:]
			}
		}
	}
	return b
}

// parseTag reads "tag: " or "tag[pid]: ": the tag runs to ':' or '['
// without a blank or a control character, and does not start with '<'
// (a header whose PRI was not one); anything else is no tag.
func parseTag(b []byte) (ident, pid string, rest []byte, ok bool) {
	const maxTag = 64
	i := 0
	for i < len(b) && i <= maxTag && b[i] != ':' && b[i] != '[' && b[i] > ' ' && b[i] != 0x7f {
		i++
	}
	if i == 0 || i > maxTag || i >= len(b) || b[i] != ':' && b[i] != '[' || b[0] == '<' {
		return "", "", nil, false
	}
	ident, rest = string(b[:i]), b[i:]
	if rest[0] == '[' {
		j := bytes.IndexByte(rest, ']')
		if j < 0 || j > 21 || !printableToken(string(rest[1:j])) {
			return "", "", nil, false
		}
		pid, rest = string(rest[1:j]), rest[j+1:]
		if len(rest) == 0 || rest[0] != ':' {
			return "", "", nil, false
		}
	}
	rest = bytes.TrimPrefix(rest[1:], []byte(" "))
	return ident, pid, rest, true
}

// printableToken reports whether v is 1 to 64 bytes of printable ASCII
// without a blank: what may go into a journal field and a prefix.
func printableToken(v string) bool {
	if v == "" || len(v) > 64 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return true
}

func isAlpha(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
