package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// term is a pseudo-terminal of the test's own, the terminal a user runs
// `pod1 run --interactive` or `rkt run --interactive` on: the command is
// started as the leader of a new session on its slave, which is then the
// command's controlling terminal, stdin, stdout and stderr.
type term struct {
	master *os.File
	// slave is the caller's terminal as the test sees it: its settings
	// and window size are read and set through it.
	slave *os.File
	mu    sync.Mutex
	out   bytes.Buffer
	done  chan struct{}
}

func newTerm(t *testing.T) *term {
	t.Helper()
	// Non-blocking, so that the runtime's poller serves it and closing
	// it ends a read that waits, whoever still holds the slave.
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	m := os.NewFile(uintptr(fd), "ptmx")
	must(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	must(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	must(t, err)
	must(t, unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 80}))
	tm := &term{master: m, slave: s, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		b := make([]byte, 4096)
		for {
			n, err := m.Read(b)
			tm.mu.Lock()
			tm.out.Write(b[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		s.Close()
		m.Close()
		<-tm.done
	})
	return tm
}

// attach makes the terminal c's controlling terminal and stdio, in a
// session of its own.
func (tm *term) attach(c *exec.Cmd) {
	c.Stdin, c.Stdout, c.Stderr = tm.slave, tm.slave, tm.slave
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
}

// Output is everything the terminal showed so far.
func (tm *term) Output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

// expect waits for the terminal to show a match of re.
func (tm *term) expect(t *testing.T, re string) {
	t.Helper()
	tm.expectN(t, re, 1)
}

// expectN waits for the terminal to show n matches of re.
func (tm *term) expectN(t *testing.T, re string, n int) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(eventDeadline)
	for len(rx.FindAllString(tm.Output(), -1)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q; it shows:\n%s", re, tm.Output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// send types keys.
func (tm *term) send(t *testing.T, keys string) {
	t.Helper()
	_, err := tm.master.WriteString(keys)
	must(t, err)
}

func (tm *term) termios(t *testing.T) unix.Termios {
	t.Helper()
	v, err := unix.IoctlGetTermios(int(tm.slave.Fd()), unix.TCGETS)
	must(t, err)
	return *v
}

// resize changes the window size, as a terminal emulator does: the kernel
// tells the terminal's foreground process group (SIGWINCH).
func (tm *term) resize(t *testing.T, rows, cols uint16) {
	t.Helper()
	must(t, unix.IoctlSetWinsize(int(tm.slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}))
}

// owned checks that the caller's terminal is still its caller's: its
// session and foreground process group are the command's (leader).
func (tm *term) owned(t *testing.T, leader int) {
	t.Helper()
	// Asked through the master: on the slave, only a process whose
	// controlling terminal it is may ask.
	sid, err := unix.IoctlGetInt(int(tm.master.Fd()), unix.TIOCGSID)
	must(t, err)
	pg, err := unix.IoctlGetInt(int(tm.master.Fd()), unix.TIOCGPGRP)
	must(t, err)
	if sid != leader || pg != leader {
		t.Errorf("the caller's terminal: session %d, foreground group %d; want %d for both", sid, pg, leader)
	}
}

// consoleLine is what the probe's console command prints for an app whose
// stdin is a terminal of its own, its controlling terminal, with its
// process group in the foreground, at the caller's window size, named
// /dev/pts/N where the app looks for it (ttyname(3): the link of fd 0,
// which must name fd 0's terminal in the app's root), as `tty` prints it.
const consoleLine = `console tty=true ctty=true fg=true name=/dev/pts/\d+ size=24x80`

// An interactive pod on a terminal, run by pod1 run: the app has a
// terminal of its own as its controlling one, in the foreground; Ctrl-C,
// Ctrl-\ and Ctrl-Z reach the app (the pod keeps running), so does a
// change of the caller's window size; the caller's terminal stays the
// caller's, and its settings are as they were once the pod has ended.
func TestConsoleKeys(t *testing.T) {
	data := dataDir(t)
	tm := newTerm(t)
	before := tm.termios(t)
	p := runBGWith(t, data, tm.attach, "--interactive", probeACIDir(t), "--name=con", "--exec=/bin/probe", "--", "console", "+", "keys")
	tm.expect(t, consoleLine)
	tm.expect(t, "keys ready")
	tm.owned(t, p.Cmd.Process.Pid)
	if raw := tm.termios(t); raw.Lflag&(unix.ICANON|unix.ISIG|unix.ECHO) != 0 {
		t.Errorf("the caller's terminal is not raw while the app has its own: lflag %#x", raw.Lflag)
	}
	for _, k := range []struct{ key, want string }{
		{"\x03", "keys SIGINT"}, {"\x1c", "keys SIGQUIT"}, {"\x1a", "keys SIGTSTP"},
	} {
		tm.send(t, k.key)
		tm.expect(t, k.want)
	}
	tm.resize(t, 33, 101)
	tm.expect(t, "keys winch 33x101")
	tm.send(t, "hello\r")
	tm.expect(t, `keys read "hello"`)
	tm.send(t, "quit\r")
	defer func() { t.Logf("the terminal showed:\n%s", tm.Output()) }()
	if code := p.wait(t); code != 0 {
		t.Errorf("pod1 run: exit %d; the terminal shows:\n%s", code, tm.Output())
	}
	if out, _, _ := pod1(t, data, "status", p.UUID); !strings.HasSuffix(out, "app-con=0\n") {
		t.Errorf("status: %q", out)
	}
	if after := tm.termios(t); after != before {
		t.Errorf("the caller's terminal settings changed:\nbefore %+v\nafter  %+v", before, after)
	}
}

// Job control in the app, as a shell does it: a job made the terminal's
// foreground group is stopped by Ctrl-Z, and the app takes the terminal
// back; as root, as another user, and in a user namespace of its own.
func TestConsoleJobControl(t *testing.T) {
	for _, v := range []struct {
		name  string
		flags []string
	}{
		{"root", nil},
		{"user", []string{"--user=1000", "--group=1000"}},
		{"private-users", []string{"--private-users=210000:65536"}},
	} {
		t.Run(v.name, func(t *testing.T) {
			data := dataDir(t)
			tm := newTerm(t)
			var args []string
			img := []string{probeACIDir(t), "--name=con", "--exec=/bin/probe"}
			if strings.HasPrefix(strings.Join(v.flags, " "), "--private-users") {
				args = append(append(append(args, v.flags...), "--interactive"), img...)
			} else {
				args = append(append([]string{"--interactive"}, img...), v.flags...)
			}
			p := runBGWith(t, data, tm.attach, append(args, "--", "jobs")...)
			tm.expect(t, `jobs fg \d+`)
			tm.send(t, "\x1a")
			tm.expect(t, "jobs stopped SIGTSTP")
			tm.expect(t, "jobs back fg=true")
			tm.expect(t, "jobs done")
			if code := p.wait(t); code != 0 {
				t.Errorf("pod1 run: exit %d; the terminal shows:\n%s", code, tm.Output())
			}
		})
	}
}

// The caller's terminal settings are put back however the pod ends: a
// stop from the host, the app killed from the host, PID 1 killed (then
// the run entry point, which outlives it, puts them back).
func TestConsoleRestored(t *testing.T) {
	for _, end := range []struct {
		name string
		end  func(t *testing.T, data string, p *bgPod)
	}{
		{"stop", func(t *testing.T, data string, p *bgPod) {
			if _, errOut, code := pod1(t, data, "stop", p.UUID); code != 0 {
				t.Fatalf("pod1 stop: %d %s", code, errOut)
			}
		}},
		{"kill-app", func(t *testing.T, data string, p *bgPod) {
			must(t, unix.Kill(appPid(t, &Pod{Dir: p.Dir, UUID: p.UUID}, "con"), unix.SIGKILL))
		}},
		{"kill-pid1", func(t *testing.T, data string, p *bgPod) {
			must(t, unix.Kill(p.waitPid(t), unix.SIGKILL))
		}},
	} {
		t.Run(end.name, func(t *testing.T) {
			data := dataDir(t)
			tm := newTerm(t)
			before := tm.termios(t)
			p := runBGWith(t, data, tm.attach, "--interactive", probeACIDir(t), "--name=con", "--exec=/bin/probe", "--", "console", "+", "sleep", "1h")
			tm.expect(t, consoleLine)
			end.end(t, data, p)
			p.wait(t)
			if after := tm.termios(t); after != before {
				t.Errorf("the caller's terminal settings changed:\nbefore %+v\nafter  %+v\nthe terminal shows:\n%s", before, after, tm.Output())
			}
		})
	}
}

// Through the real rkt: rkt run --interactive on a terminal gives the app
// a terminal of its own; Ctrl-C reaches the app, not the pod; the window
// size follows the caller's; the caller's settings are put back when the
// app is killed from the host, and after rkt stop.
func TestRktConsole(t *testing.T) {
	r := newRkt(t)
	img := r.aci("console", map[string]any{"exec": []string{"/bin/probe", "console", "+", "keys"}}, nil)
	tm := newTerm(t)
	before := tm.termios(t)
	p := r.startWith("run", tm.attach, "--interactive", img)
	tm.expect(t, consoleLine)
	tm.expect(t, "keys ready")
	tm.owned(t, p.cmd.Process.Pid)
	tm.send(t, "\x03")
	tm.expect(t, "keys SIGINT")
	tm.resize(t, 40, 120)
	tm.expect(t, "keys winch 40x120")
	if st := r.podState(p.UUID); st != "running" {
		t.Errorf("after Ctrl-C the pod is %s", st)
	}
	must(t, unix.Kill(r.appPid(p.UUID, "console"), unix.SIGKILL))
	p.wait(t)
	if after := tm.termios(t); after != before {
		t.Errorf("after the app was killed, the caller's terminal settings changed:\nbefore %+v\nafter  %+v", before, after)
	}

	tm = newTerm(t)
	p = r.startWith("run", tm.attach, "--interactive", img)
	tm.expect(t, "keys ready")
	r.rkt("stop", p.UUID)
	p.wait(t)
	if after := tm.termios(t); after != before {
		t.Errorf("after rkt stop, the caller's terminal settings changed:\nbefore %+v\nafter  %+v", before, after)
	}
}

// An interactive app restarted by its restart policy gets a new terminal
// of its own for each run, the caller's terminal raw again meanwhile (its
// keys still the app's), and the caller's settings as found at the end.
func TestConsoleRestart(t *testing.T) {
	tm := newTerm(t)
	before := tm.termios(t)
	p := newPod(t, []App{{Name: "con", Exec: probe("console", "+", "keys"),
		Annotations: map[string]string{"pod1/restart-policy": "always", "pod1/restart-backoff": "10ms",
			"pod1/start-limit-burst": "10", "pod1/start-limit-interval": "1h"}}}, nil)
	r := start(t, p, RunOpts{Args: []string{"--net=none", "--interactive"},
		Stdin: tm.slave, Stdout: tm.slave, Stderr: tm.slave,
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}})
	tm.expect(t, "keys ready")
	tm.send(t, "quit\r")
	tm.expectN(t, consoleLine, 2)
	tm.expectN(t, "keys ready", 2)
	if raw := tm.termios(t); raw.Lflag&(unix.ICANON|unix.ISIG|unix.ECHO) != 0 {
		t.Errorf("the caller's terminal is not raw during the second run: lflag %#x", raw.Lflag)
	}
	tm.send(t, "\x03")
	tm.expect(t, "keys SIGINT")
	tm.resize(t, 30, 90)
	tm.expect(t, "keys winch 30x90")
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	if rec := record(t, p, "con"); rec.RestartCount != 1 {
		t.Errorf("restart count %d, want 1; the terminal shows:\n%s", rec.RestartCount, tm.Output())
	}
	if after := tm.termios(t); after != before {
		t.Errorf("the caller's terminal settings changed:\nbefore %+v\nafter  %+v", before, after)
	}
}
