package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podattach"
)

// An app's attach sockets serve root on the host only (docs/security.md,
// "PID 1's sockets"): PID 1 checks every connection's peer (SO_PEERCRED),
// so a host process of another user, or any process of the pod (here an
// app running as root, given the sockets through a volume), is refused
// even when it can reach the sockets: it can neither write into the app's
// stdin nor read the app's output. The directories' 0700 is the first
// line; the test opens it (and the sockets) to reach the second, the
// peer check. Every wait ends on an event: each client ends by itself
// once PID 1 closes its connection, accepted or refused, while the test
// keeps the app writing.
func TestAttachSocketsRefuseAppsAndOtherUsers(t *testing.T) {
	p, r := sandbox(t, nil)
	e := startEcho(t, p)
	dir := e.dir
	// clientRefused checks a client's report: it connected (so the
	// check, not the file modes, refused it), and PID 1 closed both
	// connections without a line of the app's output.
	clientRefused := func(who, report string) {
		t.Helper()
		if !strings.Contains(report, "attach-send closed") || !strings.Contains(report, "attach-read closed") ||
			strings.Contains(report, "attach-read line") || strings.Contains(report, " error ") {
			t.Errorf("%s was not refused: %q", who, report)
		}
	}

	// A host process of another user (nobody). The sockets are opened
	// to it, and it is given the directory as its descriptor 3.
	must(t, os.Chmod(dir, 0o711))
	for _, ep := range []string{podattach.EpStdin, podattach.EpStdout} {
		must(t, os.Chmod(filepath.Join(dir, podattach.SocketName(ep)), 0o666))
	}
	exe := nobodyProbe(t)
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	fd3 := "/proc/self/fd/3/"
	cmd := exec.CommandContext(ctx, exe, "attach-send", fd3+podattach.SocketName(podattach.EpStdin), "from-nobody",
		"+", "attach-read", fd3+podattach.SocketName(podattach.EpStdout))
	cmd.ExtraFiles = []*os.File{e.df}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var nobodyOut strings.Builder
	cmd.Stdout, cmd.Stderr = &nobodyOut, &nobodyOut
	must(t, cmd.Start())
	nobodyDone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(nobodyDone) }()
	e.pokeUntil(t, nobodyDone, "the host's nobody")
	clientRefused("a host process of uid 65534", nobodyOut.String())

	// An app of the pod, root in it, with the sockets in its root.
	intruder := App{Name: "intruder", Exec: probe("attach-send", "/att/"+podattach.SocketName(podattach.EpStdin), "from-intruder",
		"+", "attach-read", "/att/"+podattach.SocketName(podattach.EpStdout)),
		MPoints: []map[string]any{{"name": "att", "path": "/att"}}}
	var pm map[string]any
	b, err := os.ReadFile(filepath.Join(p.Dir, layout.PodManifest))
	must(t, err)
	must(t, json.Unmarshal(b, &pm))
	pm["volumes"] = []any{map[string]any{"name": "att", "kind": "host", "source": dir}}
	b, err = json.Marshal(pm)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640))
	if code, out := addApp(t, p, intruder); code != 0 {
		t.Fatalf("add intruder: %d %s", code, out)
	}
	if code, out := startApp(t, p, intruder.Name); code != 0 {
		t.Fatalf("start intruder: %d %s", code, out)
	}
	intruderDone := make(chan struct{})
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		// The status file is renamed into place: once it exists the
		// intruder has ended.
		for {
			if _, err := os.Stat(filepath.Join(p.statusDir(), intruder.Name)); err == nil {
				close(intruderDone)
				return
			}
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	e.pokeUntil(t, intruderDone, "the intruder app")
	if got := p.Status(t, intruder.Name); got != 0 {
		t.Fatalf("intruder status %d: %s", got, r.Stderr)
	}
	clientRefused("an app of the pod", strings.Join(r.Lines("attach-"), "\n"))

	// Neither reached the app's input: it echoes root's next line, and
	// nothing of theirs before it.
	e.write(t, "sentinel")
	for _, l := range e.until(t, "sentinel") {
		if strings.Contains(l, "from-") {
			t.Errorf("a refused client's input reached the app: %q", l)
		}
	}
	// PID 1 says why it refused each.
	for _, why := range []string{`attach: app "echo": refused a connection: peer uid 65534 is not root`,
		`attach: app "echo": refused a connection: peer pid `} {
		if !strings.Contains(r.Stderr.String(), why) {
			t.Errorf("stage1 did not log %q", why)
		}
	}
}

// PID 1's sockets serve root of the host's pid namespace, not root of
// another pod (docs/security.md, "PID 1's sockets"): an app running as
// root in a second pod, given the first pod's directory as a read-only
// volume (what a log-shipping pod given the rkt data directory has), is
// outside the first pod's pid namespace as the host is, but it cannot
// show the host's. It is refused on the attach sockets of an app with a
// stream stdin and of an app with a terminal, and on the control socket,
// whether it speaks the sockets' protocols bare or says hello with its own
// pid namespace: the app never sees its input, and no operation is done.
// Root on the host (startEcho, the app entry points) is served throughout.
func TestPidOneSocketsRefuseOtherPods(t *testing.T) {
	p, r := sandbox(t, nil)
	e := startEcho(t, p)
	term := App{Name: "term", Exec: probe("echo-lines"), Annotations: map[string]string{
		"coreos.com/rkt/stage2/stdin": "tty", "coreos.com/rkt/stage2/stdout": "tty",
	}}
	if code, out := addApp(t, p, term); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := startApp(t, p, term.Name); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "the terminal's endpoints", func() bool {
		_, err := os.Stat(filepath.Join(p.Dir, layout.AttachDir, term.Name, podattach.EndpointsFile))
		return err == nil
	})

	in := func(app, ep string) string {
		return "/a/" + path.Join(layout.AttachDir, app, podattach.SocketName(ep))
	}
	ctl := "/a/" + layout.ControlSocket
	var args []string
	for _, v := range []string{"", "-hello"} {
		args = append(args,
			"attach-send"+v, in("echo", podattach.EpStdin), "from-otherpod"+v, "+",
			"attach-read"+v, in("echo", podattach.EpStdout), "+",
			"attach-send"+v, in(term.Name, podattach.EpTTY), "from-otherpod"+v, "+",
			"control-op"+v, ctl, "stop", "echo", "+")
	}
	spy := App{Name: "spy", Exec: probe(append(args, "exit", "0")...), MPoints: []map[string]any{{"name": "a", "path": "/a"}}}
	other := newPod(t, []App{spy}, []map[string]any{{"name": "a", "kind": "host", "source": p.Dir, "readOnly": true}})
	r2 := start(t, other, RunOpts{})
	e.pokeUntil(t, r2.done, "the other pod")
	if code := r2.Wait(t); code != 0 {
		t.Fatalf("the other pod: exit %d: %s", code, r2.Stderr)
	}
	report := strings.Join(append(r2.Lines("attach-"), r2.Lines("control-op")...), "\n")
	t.Logf("the other pod's app:\n%s", report)
	for _, v := range []string{"", "-hello"} {
		// Each connected (the check, not the path, refused it), and
		// PID 1 closed it without a line of the app's output.
		if n := strings.Count(report, "attach-send"+v+" closed"); n != 2 {
			t.Errorf("attach-send%s: %d of 2 inputs refused", v, n)
		}
		if !strings.Contains(report, "attach-read"+v+" closed") || strings.Contains(report, "attach-read"+v+" line") {
			t.Errorf("attach-read%s was not refused", v)
		}
		if !strings.Contains(report, "control-op"+v+` answer {"code":254,"error":`) {
			t.Errorf("control-op%s was not refused", v)
		}
	}
	if strings.Contains(report, " error ") {
		t.Errorf("a client did not reach a socket: %s", report)
	}
	// No operation was done: echo runs, and echoes root's next line
	// with nothing of the other pod's before it.
	if got := p.Status(t, "echo"); got != -1 {
		t.Fatalf("echo ended (%d): the other pod's stop was done", got)
	}
	e.write(t, "sentinel")
	for _, l := range e.until(t, "sentinel") {
		if strings.Contains(l, "from-") {
			t.Errorf("the other pod's input reached the app: %q", l)
		}
	}
	// PID 1 says why it refused each: no hello, or not the host's.
	for _, why := range []string{
		`attach: app "echo": refused a connection: no hello`,
		`attach: app "echo": refused a connection: peer's pid namespace is not the host's`,
		`attach: app "term": refused a connection: no hello`,
		`attach: app "term": refused a connection: peer's pid namespace is not the host's`,
		`control: refused a connection: no hello`,
		`control: refused a connection: peer's pid namespace is not the host's`,
	} {
		if !strings.Contains(r.Stderr.String(), why) {
			t.Errorf("stage1 did not log %q", why)
		}
	}
	// The host's root still acts on the pod.
	if code, out := entry(t, p, "app-stop", "--debug=false", "--app="+term.Name); code != 0 {
		t.Fatalf("root's stop of the terminal's app: %d %s", code, out)
	}
}

// pod1's clients say hello to the pod's PID 1 only (docs/security.md,
// "PID 1's sockets"): a socket at the path whose server is another process
// (here the test's own, as an app that can write in PID 1's root through
// /proc/1/root could put there) gets nothing from an app entry point or
// the attach entry point, neither the descriptor of the host's pid
// namespace that the hello carries nor a request, and the command fails
// saying why, instead of taking the impostor's answer.
func TestClientsTalkOnlyToPidOne(t *testing.T) {
	p, _ := sandbox(t, nil)
	e := startEcho(t, p)
	// impostor puts a listener in place of the socket name in dir (the
	// real one moved aside, and back at the end), answers every
	// connection as PID 1 would accept it, and reports what it was sent.
	impostor := func(dir, name, answer string) (got func() string, restore func()) {
		df, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		must(t, unix.Renameat(int(df.Fd()), name, int(df.Fd()), name+".real"))
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: podattach.FdPath(int(df.Fd()), name), Net: "unix"})
		must(t, err)
		l.SetUnlinkOnClose(false)
		var mu sync.Mutex
		var report strings.Builder
		go func() {
			for {
				c, err := l.AcceptUnix()
				if err != nil {
					return
				}
				_ = c.SetDeadline(time.Now().Add(eventDeadline))
				b := make([]byte, 4096)
				oob := make([]byte, unix.CmsgSpace(4*4))
				n, oobn, _, _, _ := c.ReadMsgUnix(b, oob)
				if n > 0 || oobn > 0 {
					mu.Lock()
					fmt.Fprintf(&report, "%q with %d bytes of control data; ", b[:n], oobn)
					mu.Unlock()
				}
				if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
					for _, m := range msgs {
						fds, _ := unix.ParseUnixRights(&m)
						for _, fd := range fds {
							unix.Close(fd)
						}
					}
				}
				_, _ = c.Write([]byte(answer))
				_ = c.Close()
			}
		}()
		got = func() string {
			mu.Lock()
			defer mu.Unlock()
			return report.String()
		}
		restore = func() {
			l.Close()
			must(t, unix.Unlinkat(int(df.Fd()), name, 0))
			must(t, unix.Renameat(int(df.Fd()), name+".real", int(df.Fd()), name))
			df.Close()
		}
		return got, restore
	}

	// The attach entry point, asked to feed echo's stdin.
	got, restore := impostor(e.dir, podattach.SocketName(podattach.EpStdin), "")
	code, out := entry(t, p, "attach", "--action=custom-attach", "--app=echo", "--stdin=true")
	restore()
	if code == 0 || !strings.Contains(out, "is not the pod's PID 1") {
		t.Errorf("attach to an impostor: exit %d: %s", code, out)
	}
	if r := got(); r != "" {
		t.Errorf("the impostor of sock-stdin was sent: %s", r)
	}
	// An app entry point, asked to stop echo.
	got, restore = impostor(filepath.Join(p.Dir, layout.Pod1Dir), filepath.Base(layout.ControlSocket), `{"code":0}`+"\n")
	code, out = entry(t, p, "app-stop", "--debug=false", "--app=echo")
	restore()
	if code == 0 || !strings.Contains(out, "is not the pod's PID 1") {
		t.Errorf("app-stop to an impostor: exit %d: %s", code, out)
	}
	if r := got(); r != "" {
		t.Errorf("the impostor of control.sock was sent: %s", r)
	}
	// PID 1's own sockets, back in place, serve as before.
	e.write(t, "sentinel")
	e.until(t, "sentinel")
	if code, out := entry(t, p, "app-stop", "--debug=false", "--app=echo"); code != 0 {
		t.Fatalf("app-stop: %d %s", code, out)
	}
}

// nobodyProbe is a copy of the probe that uid 65534 can execute, in a
// directory of its own under /tmp (the repository's may be closed to it).
func nobodyProbe(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pod1-nobody-")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	must(t, os.Chmod(d, 0o755))
	exe := filepath.Join(d, "probe")
	copyFile(t, bin("probe"), exe)
	must(t, os.Chmod(exe, 0o755))
	return exe
}

// echoApp is an app of a mutable pod that echoes its stdin (a stream) to
// its stdout (a stream), with root on the host attached to both.
type echoApp struct {
	// dir is its attach directory, df a descriptor of it.
	dir string
	df  *os.File
	in  net.Conn
	// echoed are the lines of its output.
	echoed chan string
}

// sock names the socket of endpoint ep, through df: the host path can be
// longer than a socket address may be.
func (e *echoApp) sock(ep string) string {
	return podattach.FdPath(int(e.df.Fd()), podattach.SocketName(ep))
}

// startEcho adds and starts the app "echo" in the mutable pod p and
// attaches root on the host to its stdin and stdout, as pod1's attach
// entry point does (its hello first): what root writes comes back.
func startEcho(t *testing.T, p *Pod) *echoApp {
	t.Helper()
	echo := App{Name: "echo", Exec: probe("echo-lines"), Annotations: map[string]string{
		"coreos.com/rkt/stage2/stdin": "stream", "coreos.com/rkt/stage2/stdout": "stream",
	}}
	if code, out := addApp(t, p, echo); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := startApp(t, p, echo.Name); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	e := &echoApp{dir: filepath.Join(p.Dir, layout.AttachDir, echo.Name), echoed: make(chan string, 1<<16)}
	waitFor(t, 10*time.Second, "the attach endpoints", func() bool {
		_, err := os.Stat(filepath.Join(e.dir, podattach.EndpointsFile))
		return err == nil
	})
	var err error
	e.df, err = os.OpenFile(e.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { e.df.Close() })
	dial := func(ep string) net.Conn {
		c, err := net.Dial("unix", e.sock(ep))
		must(t, err)
		t.Cleanup(func() { c.Close() })
		must(t, control.Hello(c, p.Dir))
		return c
	}
	out := dial(podattach.EpStdout)
	e.in = dial(podattach.EpStdin)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			e.echoed <- sc.Text()
		}
		close(e.echoed)
	}()
	// Accepting is asynchronous: a line written before PID 1 took the
	// output connection is echoed to no one, so root writes until one
	// comes back.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(eventDeadline)
	for {
		e.write(t, "root")
		select {
		case l := <-e.echoed:
			if strings.HasPrefix(l, "got root") {
				return e
			}
		case <-tick.C:
		case <-deadline:
			t.Fatal("root on the host was not served")
		}
	}
}

// write sends line to the app as root.
func (e *echoApp) write(t *testing.T, line string) {
	t.Helper()
	if _, err := e.in.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("root's input to the app: %v", err)
	}
}

// until waits for the app's echo of a line containing want; the lines
// before it are returned.
func (e *echoApp) until(t *testing.T, want string) []string {
	t.Helper()
	var seen []string
	deadline := time.After(eventDeadline)
	for {
		select {
		case l, ok := <-e.echoed:
			if !ok {
				t.Fatalf("root's output connection closed; before: %q", seen)
			}
			if strings.Contains(l, "got "+want) {
				return seen
			}
			seen = append(seen, l)
		case <-deadline:
			t.Fatalf("no echo of %q within %v; seen %q", want, eventDeadline, seen)
		}
	}
}

// pokeUntil keeps the app writing (a client PID 1 accepted on the output
// socket would get a line) until done is closed.
func (e *echoApp) pokeUntil(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(eventDeadline)
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			e.write(t, "poke")
		case <-deadline:
			t.Fatalf("%s still connected after %v", what, eventDeadline)
		}
	}
}
