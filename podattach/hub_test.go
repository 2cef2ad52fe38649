package podattach

import (
	"bufio"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pod1/pod1/podplan"
)

// lockedBuf is an io.Writer tests read while Attach writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A client's input reaches the app only once PID 1 has taken its output
// connections: the app's answer to it is not written to no one, however
// late PID 1 takes them (here 300 ms after the connect).
func TestAttachInputWaitsForTheOutputClients(t *testing.T) {
	t.Chdir(t.TempDir())
	h := New(func(*net.UnixConn) error { return nil }, t.Logf)
	defer h.Close()
	h.beforeRegister = func(ep string) {
		if ep == EpStdout {
			time.Sleep(300 * time.Millisecond)
		}
	}
	r, err := h.Begin("echo", podplan.Stdio{Stdin: podplan.StdioStream, Stdout: podplan.StdioStream, Stderr: podplan.StdioStream})
	if err != nil {
		t.Fatal(err)
	}
	// The app: echoes each line of its stdin to its stdout's tee, as the
	// forwarder would carry its output.
	appIn := os.NewFile(uintptr(r.Fds[0]), "app-stdin")
	go func() {
		sc := bufio.NewScanner(appIn)
		for sc.Scan() {
			r.Tees[1].Write([]byte("got " + sc.Text() + "\n"))
		}
	}()
	r.ours = nil // the app's end is the goroutine's, closed by the test
	defer appIn.Close()

	inR, inW := io.Pipe()
	var out lockedBuf
	done := make(chan error, 1)
	go func() { done <- Attach("echo", Selection{Stdin: true, Stdout: true}, inR, &out, io.Discard) }()
	if _, err := io.WriteString(inW, "hello\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(out.String(), "got hello") {
		if time.Now().After(deadline) {
			t.Fatalf("the app's answer to the input never reached the client: got %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.End("echo")
	r.Tees[1].Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("attach did not end with the app's output")
	}
	_ = inW.Close()
}
