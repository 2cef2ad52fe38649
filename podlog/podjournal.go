package podlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/journalfile"
)

// The pod's own journal's bounds: files of PodJournalFileSize, of which
// the newest PodJournalKept archived ones are kept besides the one being
// written (journalfile.Dir), so a pod's journal takes at most 32 MiB.
const (
	PodJournalFileSize = 8 << 20
	PodJournalKept     = 3
)

// PodJournal is what the pod's own journal needs: its directory, and who
// the entries are from.
type PodJournal struct {
	// Dir is the directory's descriptor, which the forwarder takes over.
	Dir int
	// Machine is the pod's machine id (_MACHINE_ID), Boot the host's
	// boot id (_BOOT_ID, the boot of the entries' monotonic clock), both
	// as 32 hex digits; Hostname is the pod's (_HOSTNAME).
	Machine, Boot, Hostname string
}

// podJournal writes the journal entries of the pod's lines to the pod's
// own journal file, from the journal queue's goroutine. The file is made
// at the first line: a pod that writes nothing costs nothing.
type podJournal struct {
	cfg  PodJournal
	opts journalfile.Options
	dir  *journalfile.Dir
	// fixed are the fields every entry has, which journald adds to the
	// entries it receives.
	fixed [][]byte
	// failed: the journal refused an entry once (reported); no more
	// are written.
	failed bool
	fields [][]byte
	msg    []byte
}

func newPodJournal(cfg PodJournal) (*podJournal, error) {
	m, err := journalfile.ParseID128(cfg.Machine)
	if err != nil {
		return nil, fmt.Errorf("pod journal: machine id: %w", err)
	}
	b, err := journalfile.ParseID128(cfg.Boot)
	if err != nil {
		return nil, fmt.Errorf("pod journal: boot id: %w", err)
	}
	return &podJournal{
		cfg:  cfg,
		opts: journalfile.Options{Machine: m, Boot: b, MaxSize: PodJournalFileSize},
		fixed: [][]byte{
			[]byte("_MACHINE_ID=" + cfg.Machine),
			[]byte("_BOOT_ID=" + cfg.Boot),
			[]byte("_HOSTNAME=" + cfg.Hostname),
		},
	}, nil
}

// append writes the entries, one a line; the first failure is returned,
// and the journal written no more.
func (p *podJournal) append(es []journalEntry) error {
	if p.failed {
		return nil
	}
	if p.dir == nil {
		d, err := journalfile.OpenDir(p.cfg.Dir, p.opts, PodJournalKept)
		if err != nil {
			p.failed = true
			return fmt.Errorf("pod journal: %w", err)
		}
		p.dir, p.cfg.Dir = d, -1
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	now, mono := time.Now(), time.Duration(ts.Nano())
	for _, e := range es {
		p.fields = append(p.fields[:0], p.fixed...)
		var syslog bool
		p.fields, syslog = appendNativeFields(p.fields, e.hdr)
		if syslog {
			p.fields = append(p.fields, []byte("_TRANSPORT=syslog"))
		} else {
			p.fields = append(p.fields, []byte("_TRANSPORT=stdout"))
		}
		p.msg = append(append(p.msg[:0], "MESSAGE="...), e.msg...)
		p.fields = append(p.fields, p.msg)
		if err := p.dir.Append(now, mono, p.fields); err != nil {
			p.failed = true
			return fmt.Errorf("pod journal: %w", err)
		}
	}
	return nil
}

// flush makes what was appended visible to journalctl.
func (p *podJournal) flush() error {
	if p.dir == nil || p.failed {
		return nil
	}
	if err := p.dir.Flush(); err != nil {
		p.failed = true
		return fmt.Errorf("pod journal: %w", err)
	}
	return nil
}

func (p *podJournal) close() error {
	if p.dir == nil {
		if p.cfg.Dir >= 0 {
			unix.Close(p.cfg.Dir)
			p.cfg.Dir = -1
		}
		return nil
	}
	err := p.dir.Close()
	p.dir = nil
	return err
}

// appendNativeFields appends the fields of hdr, in journald's native
// protocol (appendJournalField), as NAME=value; syslog says the entry is
// a /dev/log message's (POD1_STREAM=syslog).
func appendNativeFields(dst [][]byte, hdr []byte) ([][]byte, bool) {
	syslog := false
	for len(hdr) > 0 {
		nl := bytes.IndexByte(hdr, '\n')
		if nl < 0 {
			break
		}
		var f []byte
		if eq := bytes.IndexByte(hdr[:nl], '='); eq >= 0 {
			f, hdr = hdr[:nl], hdr[nl+1:]
		} else {
			// NAME\n, a 64-bit little-endian length, the value, \n.
			rest := hdr[nl+1:]
			if len(rest) < 8 {
				break
			}
			n := binary.LittleEndian.Uint64(rest)
			if n > uint64(len(rest)-8) {
				break
			}
			f = append(append(append([]byte(nil), hdr[:nl]...), '='), rest[8:8+n]...)
			hdr = rest[min(uint64(len(rest)), 8+n+1):]
		}
		if bytes.Equal(f, []byte("POD1_STREAM=syslog")) {
			syslog = true
		}
		dst = append(dst, f)
	}
	return dst, syslog
}
