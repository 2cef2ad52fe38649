package podattach

import (
	"net"
	"sync"
	"time"
)

// bcast copies one output stream to its clients. Write never waits: each
// client has a queue of its own, written by a goroutine of its own, and a
// client whose queue passes maxPending is disconnected.
type bcast struct {
	mu      sync.Mutex
	clients map[*outClient]struct{}
	closed  bool
}

func newBcast() *bcast { return &bcast{clients: map[*outClient]struct{}{}} }

type outClient struct {
	conn net.Conn
	mu   sync.Mutex
	wake chan struct{}
	buf  []byte
	// end: no more bytes come (the stream ended); dead: the client is
	// gone or fell behind.
	end, dead bool
}

// add makes c a client from now on; what the stream wrote before is not
// replayed. A stream that has ended closes c at once.
func (b *bcast) add(c net.Conn) *outClient {
	oc := &outClient{conn: c, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		c.Close()
		oc.dead = true
		return oc
	}
	b.clients[oc] = struct{}{}
	b.mu.Unlock()
	go oc.send(b)
	return oc
}

// kill drops the client (it went away).
func (oc *outClient) kill() {
	oc.mu.Lock()
	oc.dead = true
	oc.buf = nil
	oc.mu.Unlock()
	oc.signal()
}

// Write queues p for every client.
func (b *bcast) Write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for oc := range b.clients {
		oc.push(p)
	}
}

// Close ends the stream: each client gets what is queued for it, within
// flushTimeout, and is then disconnected.
func (b *bcast) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for oc := range b.clients {
		oc.mu.Lock()
		oc.end = true
		oc.mu.Unlock()
		oc.signal()
		_ = oc.conn.SetWriteDeadline(time.Now().Add(flushTimeout))
	}
}

func (oc *outClient) signal() {
	select {
	case oc.wake <- struct{}{}:
	default:
	}
}

func (oc *outClient) push(p []byte) {
	oc.mu.Lock()
	if oc.dead {
		oc.mu.Unlock()
		return
	}
	if len(oc.buf)+len(p) > maxPending {
		// Behind by more than it may be: dropped, never waited for.
		oc.dead = true
		oc.buf = nil
		oc.mu.Unlock()
		oc.conn.Close()
		return
	}
	oc.buf = append(oc.buf, p...)
	oc.mu.Unlock()
	oc.signal()
}

// send writes the client's queue until the stream ends or the client
// goes away.
func (oc *outClient) send(b *bcast) {
	defer func() {
		b.mu.Lock()
		delete(b.clients, oc)
		b.mu.Unlock()
		oc.conn.Close()
	}()
	var out []byte
	for {
		oc.mu.Lock()
		out, oc.buf = oc.buf, out[:0]
		end, dead := oc.end, oc.dead
		oc.mu.Unlock()
		if dead {
			return
		}
		if len(out) > 0 {
			if _, err := oc.conn.Write(out); err != nil {
				oc.mu.Lock()
				oc.dead = true
				oc.mu.Unlock()
				return
			}
			continue
		}
		if end {
			return
		}
		<-oc.wake
	}
}
