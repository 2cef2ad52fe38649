package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	echo := App{Name: "echo", Exec: probe("echo-lines"), Annotations: map[string]string{
		"coreos.com/rkt/stage2/stdin": "stream", "coreos.com/rkt/stage2/stdout": "stream",
	}}
	if code, out := addApp(t, p, echo); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := startApp(t, p, echo.Name); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	dir := filepath.Join(p.Dir, layout.AttachDir, echo.Name)
	waitFor(t, 10*time.Second, "the attach endpoints", func() bool {
		_, err := os.Stat(filepath.Join(dir, podattach.EndpointsFile))
		return err == nil
	})
	// Dialled through a descriptor of the directory: the host path can be
	// longer than a socket address may be.
	df, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer df.Close()
	sock := func(ep string) string { return podattach.FdPath(int(df.Fd()), podattach.SocketName(ep)) }

	// Root on the host is accepted: what it writes comes back.
	out, err := net.Dial("unix", sock(podattach.EpStdout))
	must(t, err)
	defer out.Close()
	in, err := net.Dial("unix", sock(podattach.EpStdin))
	must(t, err)
	defer in.Close()
	echoed := make(chan string, 1<<16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			echoed <- sc.Text()
		}
		close(echoed)
	}()
	write := func(line string) {
		t.Helper()
		if _, err := in.Write([]byte(line + "\n")); err != nil {
			t.Fatalf("root's input to the app: %v", err)
		}
	}
	// until waits for the app's echo of a line containing want; the lines
	// before it are returned.
	until := func(want string) []string {
		t.Helper()
		var seen []string
		deadline := time.After(eventDeadline)
		for {
			select {
			case l, ok := <-echoed:
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
	// Accepting is asynchronous: a line written before PID 1 took the
	// output connection is echoed to no one, so root writes until one
	// comes back.
	func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(eventDeadline)
		for {
			write("root")
			select {
			case l := <-echoed:
				if strings.HasPrefix(l, "got root") {
					return
				}
			case <-tick.C:
			case <-deadline:
				t.Fatal("root on the host was not served")
			}
		}
	}()
	// pokeUntil keeps the app writing (a client PID 1 accepted on the
	// output socket would get a line) until done is closed.
	pokeUntil := func(done <-chan struct{}, what string) {
		t.Helper()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(eventDeadline)
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				write("poke")
			case <-deadline:
				t.Fatalf("%s still connected after %v", what, eventDeadline)
			}
		}
	}
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
	cmd.ExtraFiles = []*os.File{df}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var nobodyOut strings.Builder
	cmd.Stdout, cmd.Stderr = &nobodyOut, &nobodyOut
	must(t, cmd.Start())
	nobodyDone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(nobodyDone) }()
	pokeUntil(nobodyDone, "the host's nobody")
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
	pokeUntil(intruderDone, "the intruder app")
	if got := p.Status(t, intruder.Name); got != 0 {
		t.Fatalf("intruder status %d: %s", got, r.Stderr)
	}
	clientRefused("an app of the pod", strings.Join(r.Lines("attach-"), "\n"))

	// Neither reached the app's input: it echoes root's next line, and
	// nothing of theirs before it.
	write("sentinel")
	for _, l := range until("sentinel") {
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
