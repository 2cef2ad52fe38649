package podattach

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/podplan"
)

// testHello stands for the hello of pod1's clients (control.Hello), and
// readHello for PID 1's peer check, which reads it: the hub passes on
// nothing of it.
const testHello = 'H'

func sendHello(c net.Conn) error {
	_, err := c.Write([]byte{testHello})
	return err
}

func readHello(c *net.UnixConn) error {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return err
	}
	if b[0] != testHello {
		return fmt.Errorf("no hello: %q", b[:])
	}
	return nil
}

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
	h := New("", readHello, t.Logf)
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
	go func() { done <- Attach("echo", Selection{Stdin: true, Stdout: true}, sendHello, inR, &out, io.Discard) }()
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

// A client attached to a terminal's output and to a stream stdin sends
// nothing on the terminal's connection: PID 1 takes what a client sends
// there as the app's input (here its stdin, the stream), so a
// synchronising byte would reach the app.
func TestAttachTypesNothingIntoTheTerminal(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a terminal needs a devpts instance of our own: root")
	}
	t.Chdir(t.TempDir())
	h := New("", readHello, t.Logf)
	defer h.Close()
	r, err := h.Begin("mixed", podplan.Stdio{Stdin: podplan.StdioStream, Stdout: podplan.StdioTTY, Stderr: podplan.StdioTTY})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(r.Master)
	stdin, slave := r.Fds[0], r.Fds[1]
	r.ours = nil
	defer unix.Close(stdin)
	defer unix.Close(slave)
	// The reads below poll: a missing input fails the test, not hangs it.
	if err := unix.SetNonblock(stdin, true); err != nil {
		t.Fatal(err)
	}
	// Raw, so that a lone byte is readable at once.
	tio, err := unix.IoctlGetTermios(slave, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG
	tio.Iflag &^= unix.ICRNL | unix.IXON
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 0, 0
	if err := unix.IoctlSetTermios(slave, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}

	inR, inW := io.Pipe()
	defer func() { _ = inW.Close() }()
	go func() {
		_ = Attach("mixed", Selection{Stdin: true, TTYOut: true}, sendHello, inR, io.Discard, io.Discard)
	}()
	if _, err := io.WriteString(inW, "x\n"); err != nil {
		t.Fatal(err)
	}
	// The input comes through stdin's pipe ...
	got := make([]byte, 8)
	deadline := time.Now().Add(3 * time.Second)
	n := 0
	for n < 2 && time.Now().Before(deadline) {
		m, _ := unix.Read(stdin, got[n:])
		n += max(m, 0)
		if n < 2 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if string(got[:n]) != "x\n" {
		t.Fatalf("the app's stdin read %q, want the input alone", got[:n])
	}
	// ... alone, and nothing reaches the terminal.
	time.Sleep(100 * time.Millisecond)
	if m, _ := unix.Read(slave, got); m > 0 {
		t.Fatalf("the app's terminal read %q: the client typed into it", got[:m])
	}
	h.End("mixed")
}
