package podattach

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// A client that never reads costs Write nothing: Write returns at once,
// and the client is disconnected once maxPending behind.
func TestSlowClientDropped(t *testing.T) {
	b := newBcast()
	srv, cli := net.Pipe()
	defer cli.Close()
	b.add(srv)
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	start := time.Now()
	for i := 0; i < 3*maxPending/len(chunk); i++ {
		b.Write(chunk)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("writes to a client that never reads took %v", d)
	}
	// Reading now: at most what was queued, then the end.
	_ = cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, cli)
	if err != nil {
		t.Fatalf("the client was not disconnected: %v (%d bytes)", err, n)
	}
	if n > int64(maxPending+len(chunk)) {
		t.Errorf("the client got %d bytes", n)
	}
	b.Close()
}

// A client that keeps up gets every byte, in order, and is disconnected
// at the stream's end after what was queued.
func TestClientGetsAll(t *testing.T) {
	b := newBcast()
	srv, cli := net.Pipe()
	b.add(srv)
	got := make(chan []byte)
	go func() {
		all, _ := io.ReadAll(cli)
		got <- all
	}()
	var want bytes.Buffer
	for i := 0; i < 1000; i++ {
		p := []byte{byte(i), byte(i >> 8), '\n'}
		want.Write(p)
		b.Write(p)
	}
	b.Close()
	select {
	case g := <-got:
		if !bytes.Equal(g, want.Bytes()) {
			t.Errorf("got %d bytes, want %d", len(g), want.Len())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client was not disconnected at the stream's end")
	}
}
