package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/podattach"
)

// attachSession is one `rkt attach` running in the background: what it
// prints, and its stdin.
type attachSession struct {
	in    io.WriteCloser
	lines chan string
	errs  chan string
	done  chan struct{}
	code  int
	kill  context.CancelFunc // SIGKILL to rkt attach
}

func (r *rktEnv) attach(t *testing.T, uuid string, args ...string) *attachSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), max(2*time.Minute, eventDeadline))
	c, _, _ := r.cmd(ctx, nil, append(append([]string{"attach"}, args...), uuid)...)
	c.Stdout, c.Stderr = nil, nil
	in, err := c.StdinPipe()
	must(t, err)
	out, err := c.StdoutPipe()
	must(t, err)
	errOut, err := c.StderrPipe()
	must(t, err)
	must(t, c.Start())
	s := &attachSession{in: in, lines: make(chan string, 100), errs: make(chan string, 100), done: make(chan struct{}), kill: cancel}
	scan := func(rd io.Reader, ch chan string) {
		sc := bufio.NewScanner(rd)
		for sc.Scan() {
			ch <- strings.TrimRight(sc.Text(), "\r")
		}
	}
	go scan(errOut, s.errs)
	go func() {
		scan(out, s.lines)
		if err := c.Wait(); err != nil {
			s.code = -1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				s.code = ee.ExitCode()
			}
		}
		close(s.done)
	}()
	t.Cleanup(func() {
		cancel()
		// Its output ends when every holder of the pipe is gone; one
		// that outlives the killed rkt attach must fail the test, not
		// hang it until the package's timeout.
		select {
		case <-s.done:
		case <-time.After(eventDeadline):
			t.Errorf("rkt attach's output still open %v after it was killed", eventDeadline)
		}
	})
	return s
}

// expect waits for a line of ch that contains want.
func (s *attachSession) expect(t *testing.T, ch chan string, want string) {
	t.Helper()
	deadline := time.After(eventDeadline)
	var seen []string
	match := func(l string) bool {
		seen = append(seen, l)
		return strings.Contains(l, want)
	}
	for {
		select {
		case l := <-ch:
			if match(l) {
				return
			}
			continue
		case <-s.done:
			// rkt attach ended, and its lines were queued before: look
			// through them, then fail now with its exit code and
			// stderr rather than at the deadline with nothing to go on.
			for len(ch) > 0 {
				if match(<-ch) {
					return
				}
			}
		case <-deadline:
		}
		var errs []string
		for ch != s.errs && len(s.errs) > 0 {
			errs = append(errs, <-s.errs)
		}
		ended := "still running"
		select {
		case <-s.done:
			ended = fmt.Sprintf("ended with %d", s.code)
		default:
		}
		t.Fatalf("no line with %q; saw %q; rkt attach %s, its stderr %q", want, seen, ended, errs)
	}
}

// attachable waits until `rkt attach --mode=list` lists app's endpoints
// (rkt's waitAppAttachable) and returns their names.
func (r *rktEnv) attachable(t *testing.T, uuid, app string) []string {
	t.Helper()
	var names []string
	waitFor(t, 30*time.Second, "app "+app+" attachable", func() bool {
		out, _, code := r.exec(rktTimeout, nil, "attach", "--mode=list", "--app="+app, uuid)
		if code != 0 {
			return false
		}
		var tg podattach.Targets
		if json.Unmarshal([]byte(out), &tg) != nil {
			t.Fatalf("rkt attach --mode=list printed %q", out)
		}
		names = nil
		for _, e := range tg.Targets {
			names = append(names, e.Name)
			if e.Domain != "unix" || e.Address != "/rkt/iottymux/"+app+"/sock-"+e.Name {
				t.Errorf("endpoint %+v is not rkt's", e)
			}
		}
		return true
	})
	return names
}

func attachEnv(t *testing.T) (*rktEnv, *rktPod) {
	r := newRkt(t)
	r.env = append(r.env, "RKT_EXPERIMENT_ATTACH=true")
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	r.rkt("fetch", r.aci("echo", map[string]any{"exec": []string{"/bin/probe", "echo-lines"}}, nil))
	return r, p
}

// rkt attach to an app whose streams are rkt's "stream" mode, through the
// real rkt: input reaches the app's stdin, which is no terminal; its
// stdout and stderr come back on attach's; a client that detaches leaves
// the app running and another can attach; the app's end ends the attach.
func TestRktAttachStream(t *testing.T) {
	r, p := attachEnv(t)
	r.rkt("app", "add", p.UUID, "pod1.test/echo", "--name=echo", "--stdin=stream", "--stdout=stream", "--stderr=stream")
	r.rkt("app", "start", p.UUID, "--app=echo")
	if got := strings.Join(r.attachable(t, p.UUID, "echo"), ","); got != "stdin,stdout,stderr" {
		t.Fatalf("endpoints %s", got)
	}
	a := r.attach(t, p.UUID)
	_, err := io.WriteString(a.in, "some_input\n")
	must(t, err)
	a.expect(t, a.lines, "got some_input tty=false ctty=false")
	a.expect(t, a.errs, "err some_input")
	// Detach (rkt attach killed, as by ^C): the app goes on.
	_ = a.in.Close()
	b := r.attach(t, p.UUID, "--mode=stdin,stdout")
	_, err = io.WriteString(b.in, "again\n")
	must(t, err)
	b.expect(t, b.lines, "got again tty=false")
	r.rkt("app", "stop", p.UUID, "--app=echo")
	select {
	case <-b.done:
	case <-time.After(eventDeadline):
		t.Fatal("rkt attach did not end with the app")
	}
	// Restarted, the app is attachable again.
	r.rkt("app", "start", p.UUID, "--app=echo")
	r.attachable(t, p.UUID, "echo")
	c := r.attach(t, p.UUID, "--app=echo")
	_, err = io.WriteString(c.in, "third\n")
	must(t, err)
	c.expect(t, c.lines, "got third")
	r.rkt("stop", p.UUID)
	p.wait(t)
}

// A killed rkt attach takes the stage1's attach proxy with it: the proxy
// would otherwise live on, reparented, holding the caller's output open
// (so a reader of rkt attach's output never sees its end) and the app's
// sockets. The app goes on, and a new attach reaches it.
func TestRktAttachEndsWithItsCaller(t *testing.T) {
	r, p := attachEnv(t)
	r.rkt("app", "add", p.UUID, "pod1.test/echo", "--name=echo", "--stdin=stream", "--stdout=stream", "--stderr=stream")
	r.rkt("app", "start", p.UUID, "--app=echo")
	r.attachable(t, p.UUID, "echo")
	a := r.attach(t, p.UUID)
	_, err := io.WriteString(a.in, "first\n")
	must(t, err)
	a.expect(t, a.lines, "got first")
	a.kill()
	start := time.Now()
	select {
	case <-a.done:
		t.Logf("rkt attach's output ended %v after rkt attach was killed", time.Since(start))
	case <-time.After(eventDeadline):
		t.Fatalf("rkt attach's output still open %v after it was killed: its proxy outlived it", eventDeadline)
	}
	b := r.attach(t, p.UUID)
	_, err = io.WriteString(b.in, "second\n")
	must(t, err)
	b.expect(t, b.lines, "got second")
	r.rkt("stop", p.UUID)
	p.wait(t)
}

// rkt attach to an app in rkt's "tty" mode: its stdin is a terminal, and
// its controlling one; input and output pass through it.
func TestRktAttachTTY(t *testing.T) {
	r, p := attachEnv(t)
	r.rkt("app", "add", p.UUID, "pod1.test/echo", "--name=echo", "--stdin=tty", "--stdout=tty", "--stderr=tty")
	r.rkt("app", "start", p.UUID, "--app=echo")
	if got := strings.Join(r.attachable(t, p.UUID, "echo"), ","); got != "tty" {
		t.Fatalf("endpoints %s", got)
	}
	a := r.attach(t, p.UUID)
	_, err := io.WriteString(a.in, "some_input\n")
	must(t, err)
	a.expect(t, a.lines, "got some_input tty=true ctty=true")
	// stderr is the terminal too.
	a.expect(t, a.lines, "err some_input")
	r.rkt("stop", p.UUID)
	p.wait(t)
	select {
	case <-a.done:
	case <-time.After(eventDeadline):
		t.Fatal("rkt attach did not end with the pod")
	}
}

// A client that connects and never reads, or disconnects, never holds the
// app up: an app writing far more than any queue holds runs to its end;
// the pod's end closes every connection (no descriptor of PID 1's is
// left for it to hold), and nothing of the pod outlives it.
func TestRktAttachSlowClient(t *testing.T) {
	r, p := attachEnv(t)
	r.rkt("fetch", r.aci("chatty", map[string]any{"exec": []string{"/bin/probe", "out", "1", "200000", "a line of output that is long enough to fill queues"}}, nil))
	r.rkt("app", "add", p.UUID, "pod1.test/echo", "--name=echo", "--stdin=stream", "--stdout=stream")
	r.rkt("app", "add", p.UUID, "pod1.test/chatty", "--name=chatty", "--stdin=stream", "--stdout=stream")
	r.rkt("app", "start", p.UUID, "--app=echo")
	r.attachable(t, p.UUID, "echo")
	dir := filepath.Join(r.data, "pods/run", p.UUID, podattach.AppDir("echo"))
	dial := func(app, ep string) net.Conn {
		d := filepath.Join(filepath.Dir(dir), app)
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		defer unix.Close(fd)
		c, err := net.Dial("unix", podattach.FdPath(fd, podattach.SocketName(ep)))
		must(t, err)
		// As pod1's attach entry point does first: PID 1 serves
		// no other client.
		must(t, control.Hello(c, filepath.Join(r.data, "pods/run", p.UUID)))
		return c
	}
	// echo: a client that sends a line and never reads, one that
	// connects and goes away.
	stuck := dial("echo", "stdout")
	dial("echo", "stdin").Close()
	in := dial("echo", "stdin")
	_, err := io.WriteString(in, "x\n")
	must(t, err)
	// chatty: a client that never reads, while the app writes ~10 MB.
	r.rkt("app", "start", p.UUID, "--app=chatty")
	r.attachable(t, p.UUID, "chatty")
	slow := dial("chatty", "stdout")
	waitFor(t, 60*time.Second, "chatty ran to its end", func() bool {
		return r.status(p.UUID).appExit("chatty") == 0
	})
	// The slow client was disconnected once far enough behind, and
	// what it got is at most the queue's worth.
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := io.Copy(io.Discard, slow)
	if n > 2<<20 {
		t.Errorf("a client that never read got %d bytes queued", n)
	}
	pid1 := r.pid(p.UUID)
	r.rkt("stop", p.UUID)
	p.wait(t)
	for _, c := range []net.Conn{stuck, in} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("a client's connection outlived the pod: %v", err)
		}
	}
	if err := unix.Kill(pid1, 0); err == nil {
		t.Errorf("PID 1 (%d) outlived the pod", pid1)
	}
}

// The attach entry point refuses bad flags with one line and 254, and an
// app that serves nothing with 254 (what rkt's waitAppAttachable polls).
func TestAttachEntryBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--action=bogus", "--app=a"}, `--action: "bogus" is not one of`},
		{[]string{"--action=list", "--app=A b"}, "--app:"},
		{[]string{"--action=custom-attach", "--app=a", "--tty-in=false"}, "no endpoint selected"},
		{[]string{"--action=list", "--app=a", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"--action=list", "--app=a"}, `app "a" has no attachable stdio`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
		cmd := exec.CommandContext(ctx, bin("stage1-init"), c.args...)
		cmd.Args[0] = "attach"
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		cancel()
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if code != 254 || !strings.Contains(string(out), c.want) || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
			t.Errorf("%v: exit %d, output %q", c.args, code, out)
		}
	}
}
