package console

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal of the host's devpts: its master,
// non-blocking, and its slave.
func openPTY(t *testing.T) (master int, slave *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// readUntil reads fd (non-blocking) until what it read contains want.
func readUntil(t *testing.T, fd int, want string) {
	t.Helper()
	var got []byte
	b := make([]byte, 256)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(got), want) {
		if time.Now().After(deadline) {
			t.Fatalf("read %q, want %q in it", got, want)
		}
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		_, _ = unix.Poll(p, 100)
		if n, err := unix.Read(fd, b); err == nil && n > 0 {
			got = append(got, b[:n]...)
		}
	}
}

// The caller's terminal is raw while the console runs and as found after;
// bytes go both ways; the caller's window size reaches the app's.
func TestConsoleJoinsAndRestores(t *testing.T) {
	callerM, caller := openPTY(t)
	defer unix.Close(callerM)
	defer caller.Close()
	appM, app := openPTY(t)
	before, err := unix.IoctlGetTermios(int(caller.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(appM, int(caller.Fd()), int(caller.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := unix.IoctlGetTermios(int(caller.Fd()), unix.TCGETS)
	if raw.Lflag&(unix.ICANON|unix.ISIG|unix.ECHO) != 0 || raw.Oflag&unix.OPOST != 0 {
		t.Errorf("the caller's terminal is not raw: %+v", raw)
	}
	// Typed on the caller's side, read on the app's.
	if _, err := unix.Write(callerM, []byte("typed\r")); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 64)
	n, err := app.Read(line)
	if err != nil || string(line[:n]) != "typed\n" {
		t.Errorf("the app read %q, %v", line[:n], err)
	}
	// Written by the app, shown on the caller's side.
	if _, err := app.WriteString("shown\n"); err != nil {
		t.Fatal(err)
	}
	readUntil(t, callerM, "shown\r\n")
	if err := unix.IoctlSetWinsize(int(caller.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 51, Col: 132}); err != nil {
		t.Fatal(err)
	}
	c.Resize()
	if ws, err := unix.IoctlGetWinsize(int(app.Fd()), unix.TIOCGWINSZ); err != nil || ws.Row != 51 || ws.Col != 132 {
		t.Errorf("the app's window: %+v %v", ws, err)
	}
	// The app's end: its last output is copied before the settings are
	// put back.
	if _, err := app.WriteString("last\n"); err != nil {
		t.Fatal(err)
	}
	app.Close()
	t0 := time.Now()
	c.End(5 * time.Second)
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("End took %v with no writer left", d)
	}
	readUntil(t, callerM, "last\r\n")
	after, _ := unix.IoctlGetTermios(int(caller.Fd()), unix.TCGETS)
	if *after != *before {
		t.Errorf("settings not put back:\nbefore %+v\nafter  %+v", before, after)
	}
}

// A descendant of the app that keeps its terminal open does not keep the
// caller's terminal raw beyond the drain.
func TestConsoleEndIsBounded(t *testing.T) {
	callerM, caller := openPTY(t)
	defer unix.Close(callerM)
	defer caller.Close()
	appM, app := openPTY(t)
	defer app.Close()
	before, _ := unix.IoctlGetTermios(int(caller.Fd()), unix.TCGETS)
	c, err := Start(appM, int(caller.Fd()), int(caller.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.End(200 * time.Millisecond)
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("End took %v", d)
	}
	after, _ := unix.IoctlGetTermios(int(caller.Fd()), unix.TCGETS)
	if *after != *before {
		t.Errorf("settings not put back:\nbefore %+v\nafter  %+v", before, after)
	}
}
