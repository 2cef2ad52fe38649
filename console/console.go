// Package console joins the pseudo-terminal of an interactive pod's app to
// the terminal of the caller (rkt run, pod1 run): the caller's terminal is
// put in raw mode, so that its keys (Ctrl-C, Ctrl-Z, Ctrl-\) reach the
// app's terminal as bytes, where the app's line discipline turns them into
// signals for the app's foreground job, not the stage1's; every byte is
// copied both ways; the caller's window size is copied to the app's
// terminal, whose kernel then tells the app's foreground job (SIGWINCH);
// and the caller's terminal settings are put back as they were found.
//
// The caller's terminal stays the caller's: it is never made anyone's
// controlling terminal, nor is its foreground process group changed, and
// its file status flags (O_NONBLOCK) are left alone, since the caller's
// shell shares them.
package console

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// Console is one run of the app's terminal joined to the caller's.
type Console struct {
	in, out int
	master  *os.File
	saved   *unix.Termios
	// stopR wakes the input copier when the console ends; stopW is its
	// other end.
	stopR, stopW int
	// outDone is closed when the app's terminal has no more output:
	// every descriptor of its other end is closed and what was written
	// is copied.
	outDone chan struct{}
	endOnce sync.Once
	// mu orders a resize against the end.
	mu    sync.Mutex
	ended bool
}

// Start joins master, the master side of the app's new terminal, opened
// non-blocking, to the caller's terminal: input read from in, output
// written to out. It takes master. The caller's terminal is raw from now
// until End.
func Start(master, in, out int) (*Console, error) {
	saved, err := unix.IoctlGetTermios(in, unix.TCGETS)
	if err != nil {
		unix.Close(master)
		return nil, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		unix.Close(master)
		return nil, err
	}
	c := &Console{
		in: in, out: out, saved: saved,
		master: os.NewFile(uintptr(master), "console"),
		stopR:  p[0], stopW: p[1],
		outDone: make(chan struct{}),
	}
	c.Resize()
	raw := *saved
	makeRaw(&raw)
	if err := unix.IoctlSetTermios(in, unix.TCSETS, &raw); err != nil {
		c.master.Close()
		unix.Close(c.stopR)
		unix.Close(c.stopW)
		return nil, err
	}
	go c.copyOut()
	go c.copyIn()
	return c, nil
}

// makeRaw is cfmakeraw(3): no line editing, echo, signal keys or output
// processing on the caller's side; the app's terminal does all of that.
func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}

// Resize copies the caller's window size to the app's terminal; the
// kernel signals the app's foreground job when it changes.
func (c *Console) Resize() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	ws, err := unix.IoctlGetWinsize(c.in, unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	_ = unix.IoctlSetWinsize(int(c.master.Fd()), unix.TIOCSWINSZ, ws)
}

// copyOut copies the app's output to the caller until the app's terminal
// has no writer left (EIO) or the console ends.
func (c *Console) copyOut() {
	defer close(c.outDone)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.master.Read(buf)
		if n > 0 && !writeAll(c.out, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// writeAll writes b to fd, waiting for it when it is non-blocking (the
// caller's choice, left as it is); false when fd takes nothing more.
func writeAll(fd int, b []byte) bool {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(p, 1000); err != nil && err != unix.EINTR {
				return false
			}
			continue
		case err != nil:
			return false
		}
		b = b[n:]
	}
	return true
}

// copyIn copies the caller's input to the app's terminal. It reads only
// what poll says is there, so that once the console ends no byte meant
// for whoever has the caller's terminal next is taken.
func (c *Console) copyIn() {
	defer unix.Close(c.stopR)
	buf := make([]byte, 4096)
	for {
		p := []unix.PollFd{{Fd: int32(c.in), Events: unix.POLLIN}, {Fd: int32(c.stopR), Events: unix.POLLIN}}
		if _, err := unix.Poll(p, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if p[1].Revents != 0 {
			return
		}
		if p[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) == 0 {
			continue
		}
		n, err := unix.Read(c.in, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if n <= 0 {
			// The caller's terminal hung up: the app reads no
			// more, and is told so by its session's end.
			return
		}
		if _, err := c.master.Write(buf[:n]); err != nil {
			return
		}
	}
}

// outWait bounds End's wait for the output copy once the master is
// closed.
const outWait = time.Second

// End waits up to drain for the app's last output to be copied, stops
// both copies, closes the master (the app's terminal hangs up if anything
// still holds it) and puts the caller's terminal settings back.
func (c *Console) End(drain time.Duration) {
	c.endOnce.Do(func() {
		t := time.NewTimer(drain)
		select {
		case <-c.outDone:
		case <-t.C:
		}
		c.mu.Lock()
		c.ended = true
		c.mu.Unlock()
		unix.Close(c.stopW)
		// Closing an os.File that a Read waits on wakes it (the
		// runtime's poller). A copy that waits to write to a caller's
		// terminal nobody reads is not waited for long: the pod's end
		// must not hang on it.
		c.master.Close()
		t.Reset(outWait)
		select {
		case <-c.outDone:
		case <-t.C:
		}
		t.Stop()
		// TCSETS, not TCSETSW: the output copied is processed already,
		// and a caller's terminal that is not being read must not keep
		// the pod from ending.
		_ = unix.IoctlSetTermios(c.in, unix.TCSETS, c.saved)
	})
}
