package podlog

import (
	"sync"
	"time"
)

// journalEntry is one line waiting for the journal.
type journalEntry struct {
	msg string
	hdr []byte
	app *appLog
	// own is the size of hdr when it is the entry's own (a syslog
	// message's), counted with the line's.
	own int
}

// journalQueue feeds the journal from one goroutine: a send that waits
// (journald busy or stopped) holds up the queue, never a stream. The
// queue is a slice that grows with a burst and is let go once sent, so
// it costs memory only while lines wait.
type journalQueue struct {
	mu sync.Mutex
	q  []journalEntry
	// inflight is the batch being sent, next the first of it not sent.
	inflight []journalEntry
	next     int
	// n and bytes count the lines (and their bytes) queued or in flight.
	n, bytes int
	// closed: no more lines come; abandoned: the rest was counted as
	// dropped, the sender stops.
	closed, abandoned bool
	wake              chan struct{}
	done              chan struct{}
	// report is told the first error of the journal (nil: not told).
	report func(error)
	// toHost: the lines go to the host's journal, through conn. conn
	// and file (the pod's own journal, nil for none) are the sender's
	// alone once it runs.
	toHost bool
	conn   journalConn
	file   *podJournal
}

// newJournalQueue starts the sender of the lines to the host's journal
// (toHost) and to the pod's own (file, nil for none).
func newJournalQueue(toHost bool, file *podJournal) *journalQueue {
	j := &journalQueue{wake: make(chan struct{}, 1), done: make(chan struct{}), conn: journalConn{fd: -1},
		toHost: toHost, file: file}
	go j.run()
	return j
}

// OnJournalError sets what is told the first time the journal refuses a
// line (the lines themselves are counted as dropped).
func (f *Forwarder) OnJournalError(report func(error)) {
	if f.journal != nil {
		f.journal.mu.Lock()
		f.journal.report = report
		f.journal.mu.Unlock()
	}
}

// put queues a line (copied) with its fields; false if it does not fit.
// The copy is made only once it fits: under a flood most lines do not,
// and PID 1 would otherwise spend its time allocating them.
func (j *journalQueue) put(line, hdr []byte, app *appLog) bool {
	return j.putEntry(line, hdr, app, 0)
}

// putOwned is put for a line whose fields are its own, made for it: their
// bytes count against the queue's bound too.
func (j *journalQueue) putOwned(line, hdr []byte, app *appLog) bool {
	return j.putEntry(line, hdr, app, len(hdr))
}

func (j *journalQueue) putEntry(line, hdr []byte, app *appLog, own int) bool {
	j.mu.Lock()
	if j.closed || j.n >= journalQueueLen || j.bytes+len(line)+own > journalQueueBytes {
		j.mu.Unlock()
		return false
	}
	j.q = append(j.q, journalEntry{msg: string(line), hdr: hdr, app: app, own: own})
	j.n++
	j.bytes += len(line) + own
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return true
}

func (j *journalQueue) isAbandoned() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.abandoned
}

func (j *journalQueue) run() {
	defer close(j.done)
	defer j.conn.close()
	defer j.closeFile()
	for {
		j.mu.Lock()
		batch, closed := j.q, j.closed
		j.q, j.inflight, j.next = nil, batch, 0
		j.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			<-j.wake
			continue
		}
		for i := 0; i < len(batch); {
			k, err := 1, error(nil)
			if j.toHost {
				k = j.entryLines(batch[i:])
				err = j.conn.send(batch[i:i+k], j.isAbandoned)
			}
			if j.file != nil {
				j.fileErr(j.file.append(batch[i : i+k]))
			}
			j.mu.Lock()
			if j.abandoned {
				j.mu.Unlock()
				return
			}
			for _, e := range batch[i : i+k] {
				j.bytes -= len(e.msg) + e.own
			}
			i += k
			j.next = i
			j.n -= k
			report := j.report
			if err != nil && report != nil {
				j.report = nil
			}
			j.mu.Unlock()
			if err != nil {
				batch[i-1].app.dropped.Add(uint64(k))
				if report != nil {
					report(err)
				}
			}
		}
		if j.file != nil {
			j.fileErr(j.file.flush())
		}
	}
}

// fileErr tells the pod's own journal's first failure, after which it
// takes no more lines (podJournal): the lines still go everywhere else.
func (j *journalQueue) fileErr(err error) {
	if err == nil {
		return
	}
	j.mu.Lock()
	report := j.report
	j.mu.Unlock()
	if report != nil {
		report(err)
	}
}

// closeFile closes the pod's own journal, offline, once the sender stops.
func (j *journalQueue) closeFile() {
	if j.file != nil {
		j.fileErr(j.file.close())
	}
}

// entryLines returns how many of the lines waiting, from the first of
// es, go into one entry: one, unless the journal is behind by more than
// journalBehind lines. journald takes entries at a rate of its own,
// whatever their size (one datagram is one entry, and each costs it a
// wake-up and a read), so when it cannot keep up with an app, lines of
// the same stream are sent together, up to journalEntryLines of them or
// journalEntryBytes: they reach the journal, as one entry, instead of
// being dropped once the queue is full.
func (j *journalQueue) entryLines(es []journalEntry) int {
	j.mu.Lock()
	behind := j.n > journalBehind
	j.mu.Unlock()
	if !behind {
		return 1
	}
	k, size := 1, len(es[0].msg)
	for k < len(es) && k < journalEntryLines && es[k].app == es[0].app && &es[k].hdr[0] == &es[0].hdr[0] &&
		size+1+len(es[k].msg) <= journalEntryBytes {
		size += 1 + len(es[k].msg)
		k++
	}
	return k
}

// finish lets the journal take what is queued, at most for d, once no
// stream can add more (ended); what is left counts as dropped. The
// sender has stopped, and closed its socket, when it returns.
func (j *journalQueue) finish(ended bool, d time.Duration) {
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	// As long as the journal takes lines, up to d; one that took none
	// for journalStall is given up on.
	deadline := time.Now().Add(d)
	last := -1
	for ended && time.Now().Before(deadline) {
		j.mu.Lock()
		n := j.n
		j.mu.Unlock()
		if n == last {
			break
		}
		last = n
		select {
		case <-j.done:
			return
		case <-time.After(min(journalStall, max(time.Until(deadline), 0))):
		}
	}
	j.mu.Lock()
	j.abandoned = true
	for _, e := range j.inflight[j.next:] {
		e.app.dropped.Add(1)
	}
	for _, e := range j.q {
		e.app.dropped.Add(1)
	}
	j.q, j.inflight = nil, nil
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	// The sender sees it within a poll of the socket.
	select {
	case <-j.done:
	case <-time.After(2 * journalPoll):
	}
}
