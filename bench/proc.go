package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The bench is a child subreaper and the only waiter of its process: every
// process any peer leaves behind (conmon's daemon, crun's intermediate
// children, a pod's PID 1 whose run process died) comes back to us, so its
// end is timed by our own wait4 and it is never left to the host's PID 1,
// which reaps lazily. Nothing here uses os/exec: its Wait would race our
// wait4(-1) for the same exits.

// child is one process we started.
type child struct {
	pid   int
	start time.Time
	done  chan struct{}
	// Set before done is closed.
	ws  unix.WaitStatus
	end time.Time
	// cpu is the user and system time of the process and of every
	// descendant reaped before it (its rusage at wait4): not that of an
	// orphan it left, which is reaped by us, as subreaper, on its own.
	cpu time.Duration
	out *os.File // stdout+stderr, a memfd
}

// reaper collects every exit of the bench's children and adopted orphans.
type reaper struct {
	mu    sync.Mutex
	procs map[int]*child
	live  int
	wake  chan struct{}
	// adopted counts unregistered processes reaped (orphans handed to us
	// as subreaper).
	adopted int
}

var reap = &reaper{procs: map[int]*child{}, wake: make(chan struct{}, 1)}

// startReaper makes the bench a subreaper and starts the one wait4 loop.
// It runs on a thread of its own, blocked in wait4, so an exit is seen
// within the scheduler's wake-up latency, not a signal's round trip.
func startReaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("subreaper: %w", err)
	}
	// SIGCHLD must not be ignored, or the kernel auto-reaps.
	signal.Reset(unix.SIGCHLD)
	go reap.loop()
	return nil
}

func (r *reaper) loop() {
	runtime.LockOSThread()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, 0, &ru)
		now := time.Now()
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			<-r.wake
			continue
		}
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		r.mu.Lock()
		c, ok := r.procs[pid]
		if ok {
			delete(r.procs, pid)
			r.live--
		} else {
			r.adopted++
		}
		r.mu.Unlock()
		if ok {
			c.ws, c.end = ws, now
			c.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			close(c.done)
		}
	}
}

// spec describes a process to start.
type spec struct {
	argv  []string
	path  string // default argv[0]
	dir   string
	env   []string // default os.Environ()
	files []*os.File
	// stdin, if nil, is /dev/null.
	stdin *os.File
	// noOut sends stdout and stderr to /dev/null instead of a memfd.
	noOut bool
	sys   *syscall.SysProcAttr
}

var devNull = func() *os.File {
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		panic(err)
	}
	return f
}()

// start forks and registers a process under the reaper's lock, so its exit
// cannot be collected before it is known.
func start(s spec) (*child, error) {
	c := &child{done: make(chan struct{})}
	out := devNull
	if !s.noOut {
		fd, err := unix.MemfdCreate("bench-out", unix.MFD_CLOEXEC)
		if err != nil {
			return nil, err
		}
		c.out = os.NewFile(uintptr(fd), "out")
		out = c.out
	}
	stdin := s.stdin
	if stdin == nil {
		stdin = devNull
	}
	path := s.path
	if path == "" {
		path = s.argv[0]
	}
	env := s.env
	if env == nil {
		env = os.Environ()
	}
	sys := s.sys
	if sys == nil {
		sys = &syscall.SysProcAttr{}
	}
	// A process group of its own, so a timeout can kill it and all it
	// started.
	if !sys.Setsid {
		sys.Setpgid = true
	}
	attr := &os.ProcAttr{Dir: s.dir, Env: env, Files: append([]*os.File{stdin, out, out}, s.files...), Sys: sys}
	reap.mu.Lock()
	c.start = time.Now()
	p, err := os.StartProcess(path, s.argv, attr)
	if err != nil {
		reap.mu.Unlock()
		if c.out != nil {
			c.out.Close()
		}
		return nil, fmt.Errorf("start %s: %w", s.argv[0], err)
	}
	c.pid = p.Pid
	_ = p.Release()
	reap.procs[c.pid] = c
	reap.live++
	reap.mu.Unlock()
	select {
	case reap.wake <- struct{}{}:
	default:
	}
	return c, nil
}

// wait waits for the child's exit, killing its process group (and with it
// what it started) when the timeout passes first.
func (c *child) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
	}
	c.kill()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pid %d (%s): did not die after SIGKILL", c.pid, c.output(200))
	}
	return fmt.Errorf("pid %d: timed out after %v: %s", c.pid, timeout, c.output(400))
}

func (c *child) kill() {
	_ = unix.Kill(-c.pid, unix.SIGKILL)
	_ = unix.Kill(c.pid, unix.SIGKILL)
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// elapsed is fork to reaped.
func (c *child) elapsed() time.Duration { return c.end.Sub(c.start) }

// code is the exit code in the 128+signal convention.
func (c *child) code() int {
	if c.ws.Signaled() {
		return 128 + int(c.ws.Signal())
	}
	return c.ws.ExitStatus()
}

// output returns up to max bytes of the child's tail output.
func (c *child) output(max int) string {
	if c.out == nil {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(c.out.Fd()), &st); err != nil {
		return ""
	}
	off := max64(0, st.Size-int64(max))
	b := make([]byte, st.Size-off)
	n, _ := c.out.ReadAt(b, off)
	return strings.TrimSpace(string(b[:n]))
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (c *child) close() {
	if c.out != nil {
		c.out.Close()
	}
}

// run starts a process and waits for it; a non-zero exit is an error.
func run(s spec, timeout time.Duration) (*child, error) {
	c, err := start(s)
	if err != nil {
		return nil, err
	}
	if err := c.wait(timeout); err != nil {
		return c, err
	}
	if code := c.code(); code != 0 {
		return c, fmt.Errorf("%s exited %d: %s", strings.Join(s.argv, " "), code, c.output(600))
	}
	return c, nil
}

// quiet runs a short helper command and returns its output.
func quiet(timeout time.Duration, argv ...string) (string, error) {
	c, err := run(spec{argv: argv, path: lookPath(argv[0])}, timeout)
	if c == nil {
		return "", err
	}
	defer c.close()
	return c.output(1 << 24), err
}

// lookPath resolves a command name in PATH (os/exec's LookPath without
// os/exec).
func lookPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH") + ":/usr/sbin:/sbin") {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
