package podlog

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"golang.org/x/sys/unix"
)

// journalSocket is journald's native protocol socket, the one
// go-systemd's journal package sends to.
const journalSocket = "/run/systemd/journal/socket"

// When more lines than journalBehind wait for the journal, lines of one
// stream are sent together, up to journalEntryLines of them and
// journalEntryBytes (entryLines).
const (
	journalBehind     = journalQueueLen / 8
	journalEntryLines = 256
	journalEntryBytes = 32 << 10
)

// journalPoll is how long the sender waits at a time for room in a full
// socket before it looks again whether it was given up on.
const journalPoll = 100 * time.Millisecond

// JournalEnabled reports whether the host's journal listens. The journal
// is reached by its socket's path: the sender, PID 1, must see the host's
// /run/systemd/journal in its root.
func JournalEnabled() bool { return journal.Enabled() }

// journalHeader returns the fields of an entry but its message, in
// journald's native protocol, with the stream's priority (stderr's is
// err, stdout's info). The fields are the app's, fixed for its life, so
// they are made once here and not for each line.
func journalHeader(stream int, vars map[string]string) []byte {
	prio := journal.PriInfo
	if stream == Stderr {
		prio = journal.PriErr
	}
	b := appendJournalField(nil, "PRIORITY", strconv.Itoa(int(prio)))
	for _, k := range []string{"SYSLOG_IDENTIFIER", "POD1_POD_UUID", "POD1_APP", "POD1_STREAM"} {
		if v, ok := vars[k]; ok {
			b = appendJournalField(b, k, v)
		}
	}
	return b
}

// appendJournalField appends one field in the native protocol: NAME=value
// and a newline, or, for a value with a newline, the name, a newline,
// the value's length (64 bits, little-endian), the value and a newline.
func appendJournalField(b []byte, name, value string) []byte {
	if !strings.Contains(value, "\n") {
		b = append(b, name...)
		b = append(b, '=')
		b = append(b, value...)
		return append(b, '\n')
	}
	b = append(b, name...)
	b = append(b, '\n')
	b = binary.LittleEndian.AppendUint64(b, uint64(len(value)))
	b = append(b, value...)
	return append(b, '\n')
}

// journalConn sends entries to journald over one datagram socket,
// connected once. go-systemd's Send, which this replaces, builds each
// entry anew with fmt, and names the socket's path on every datagram
// (a path lookup in the kernel each time): under a flood that work is
// PID 1's, on the CPUs the app and journald need.
type journalConn struct {
	fd  int // -1: not connected
	buf []byte
}

func (c *journalConn) connect() error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: journalSocket}); err != nil {
		unix.Close(fd)
		return err
	}
	c.fd = fd
	return nil
}

func (c *journalConn) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// send sends lines of one stream of one app as one entry (several
// joined by newlines, with POD1_LINES their number), waiting while the
// socket is full (journald busy or stopped) until stop says it was given
// up on. A journald that was
// restarted has a new socket: the old connection is refused, and the
// entry goes to the new one.
func (c *journalConn) send(es []journalEntry, stop func() bool) error {
	b := append(c.buf[:0], es[0].hdr...)
	size := len(es) - 1
	for _, e := range es {
		size += len(e.msg)
	}
	if len(es) > 1 {
		b = appendJournalField(b, "POD1_LINES", strconv.Itoa(len(es)))
	}
	b = append(b, "MESSAGE\n"...)
	b = binary.LittleEndian.AppendUint64(b, uint64(size))
	for i, e := range es {
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, e.msg...)
	}
	b = append(b, '\n')
	c.buf = b
	retried := false
	for {
		if c.fd < 0 {
			if err := c.connect(); err != nil {
				return err
			}
		}
		_, err := unix.Write(c.fd, b)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			if stop() {
				return err
			}
			pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(pfd, int(journalPoll/time.Millisecond))
		case !retried && (errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOTCONN)):
			retried = true
			c.close()
		default:
			return err
		}
	}
}
