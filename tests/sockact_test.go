package tests

// Socket activation (issue 35 item 6): rkt run started with the listening
// sockets of a systemd socket unit (fds 3.., LISTEN_FDS, LISTEN_PID its own
// pid) hands each to the app whose manifest marks the port socketActivated,
// as rkt's stage1 did through the systemd in its pods (package sockact).
// The tests pass the sockets as systemd does: bound here, at fds 3.. of a
// shell that sets LISTEN_PID to its own pid and execs rkt (or pod1 run).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpSocket is a listening TCP socket of ours on 127.0.0.1 (ip) and its
// port.
func tcpSocket(t *testing.T, ip string, port int) (*os.File, int) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	must(t, err)
	f, err := l.(*net.TCPListener).File()
	must(t, err)
	port = l.Addr().(*net.TCPAddr).Port
	l.Close() // f is the same socket, still listening
	t.Cleanup(func() { f.Close() })
	return f, port
}

// udpSocket is a UDP socket of ours on 127.0.0.1 and its port.
func udpSocket(t *testing.T) (*os.File, int) {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	must(t, err)
	f, err := c.(*net.UDPConn).File()
	must(t, err)
	port := c.LocalAddr().(*net.UDPAddr).Port
	_ = c.Close()
	t.Cleanup(func() { f.Close() })
	return f, port
}

// activated makes a command socket activated with files at fds 3..:
// LISTEN_PID is the pid that execs it (a shell's $$), as systemd sets it
// for the process it starts.
func activated(files []*os.File, fds, names string) func(*exec.Cmd) {
	return func(c *exec.Cmd) {
		c.Args = append([]string{"/bin/sh", "-c", `LISTEN_PID=$$ exec "$@"`, "sh"}, c.Args...)
		c.Path = "/bin/sh"
		c.ExtraFiles = files
		c.Env = append(slices.Clone(c.Env), "LISTEN_FDS="+fds)
		if names != "" {
			c.Env = append(c.Env, "LISTEN_FDNAMES="+names)
		}
	}
}

// ask sends line to the app on network's port of 127.0.0.1 and returns
// its answer.
func ask(t *testing.T, network string, port int, line string) string {
	t.Helper()
	c, err := net.DialTimeout(network, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second)
	must(t, err)
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(eventDeadline)))
	_, err = fmt.Fprintf(c, "%s\n", line)
	must(t, err)
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("%s port %d: no answer to %q: %v", network, port, line, err)
	}
	return strings.TrimSpace(answer)
}

// sockInode is the inode of the socket f.
func sockInode(t *testing.T, f *os.File) uint64 {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Fstat(int(f.Fd()), &st))
	return st.Ino
}

// holders lists the host's processes holding the socket of inode ino, our
// own included.
func holders(ino uint64) []int {
	want := fmt.Sprintf("socket:[%d]", ino)
	var pids []int
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && l == want {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			if !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	slices.Sort(pids)
	return pids
}

// waitHolders waits until exactly want (and we) hold the socket ino.
func waitHolders(t *testing.T, what string, ino uint64, want ...int) {
	t.Helper()
	want = append(want, os.Getpid())
	slices.Sort(want)
	var got []int
	deadline := time.Now().Add(eventDeadline)
	for {
		if got = holders(ino); slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			desc := make([]string, len(got))
			for i, p := range got {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
				desc[i] = fmt.Sprintf("%d (%s)", p, strings.TrimSpace(string(comm)))
			}
			t.Fatalf("%s: held by %v, want only %v", what, desc, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The app whose ports are socket-activated answers on the sockets passed to
// rkt run, in its manifest's order whatever the order they were passed in,
// with LISTEN_PID its own pid as it sees it and LISTEN_FDNAMES its ports'
// names; a restarted run gets them again; no other process of the pod, the
// waiter or PID 1's environment holds them, and PID 1 lets go of an app's
// once the app has finished for good.
func TestRktSocketActivation(t *testing.T) {
	r := newRkt(t)
	web, webPort := tcpSocket(t, "127.0.0.1", 0)
	dns, dnsPort := udpSocket(t)
	once, oncePort := tcpSocket(t, "127.0.0.1", 0)
	webImg := r.aci("sa-web", map[string]any{
		// Two answers a run, then a failure: it is restarted.
		"exec": probe("sock-serve", "2", "+", "exit", "3"),
		"ports": []map[string]any{
			{"name": "web", "protocol": "tcp", "port": webPort, "socketActivated": true},
			{"name": "plain", "protocol": "tcp", "port": 9},
			{"name": "dns", "protocol": "udp", "port": dnsPort, "socketActivated": true},
		},
	}, nil)
	patchManifest(t, webImg, `"annotations":[{"name":"pod1/restart-policy","value":"on-failure"},{"name":"pod1/restart-backoff","value":"10ms"}],`)
	onceImg := r.aci("sa-once", map[string]any{
		"exec":  probe("sock-serve", "1"),
		"ports": []map[string]any{{"name": "once", "protocol": "tcp", "port": oncePort, "socketActivated": true}},
	}, nil)
	otherImg := r.aci("sa-other", map[string]any{"exec": probe("env", "+", "fds", "+", "sleep", "1h")}, nil)
	p := r.startWith("run", activated([]*os.File{dns, once, web}, "3", "d:o:w"), webImg, onceImg, otherImg)

	first := ask(t, "tcp", webPort, "one")
	f := strings.Fields(first)
	if len(f) != 3 || f[0] != "web" || f[2] != "one" {
		t.Fatalf("web answered %q, want \"web <pid> one\"", first)
	}
	if a := ask(t, "udp", dnsPort, "two"); a != "dns "+f[1]+" two" {
		t.Fatalf("dns answered %q, want %q", a, "dns "+f[1]+" two")
	}
	// The first run exited 3 after two answers; the next one answers.
	second := ask(t, "tcp", webPort, "three")
	if g := strings.Fields(second); len(g) != 3 || g[0] != "web" || g[1] == f[1] || g[2] != "three" {
		t.Fatalf("the restarted web answered %q, want \"web <another pid> three\" (first run: %q)", second, first)
	}
	if a := ask(t, "tcp", oncePort, "four"); !strings.HasPrefix(a, "once ") || !strings.HasSuffix(a, " four") {
		t.Fatalf("once answered %q", a)
	}

	pid1 := r.pid(p.UUID)
	webPid := r.appPid(p.UUID, "sa-web")
	// Only PID 1 (for the restarts) and the app's process hold the
	// app's sockets: not the other apps, not the waiter (rkt's pid).
	waitHolders(t, "web's socket", sockInode(t, web), pid1, webPid)
	waitHolders(t, "dns's socket", sockInode(t, dns), pid1, webPid)
	// once exited 0, never to run again: nobody holds its socket.
	waitHolders(t, "once's socket after its end", sockInode(t, once))
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid1))
	must(t, err)
	if strings.Contains(string(env), "LISTEN_") {
		t.Errorf("PID 1's environment has LISTEN_*: %q", env)
	}

	r.rkt("stop", p.UUID)
	p.wait(t)
	out := p.out.String()
	for _, re := range []string{`^sock-serve pid=\d+ fds=2 names=web:dns$`, `^sock-serve pid=\d+ fds=1 names=once$`, `^fds 0 1 2$`} {
		if !hasLine(out, re) {
			t.Errorf("no line %s in the pod's output:\n%s\nstderr: %s", re, out, p.errb)
		}
	}
	if hasLine(out, `^env "LISTEN_`) {
		t.Errorf("the other app got LISTEN_*:\n%s", out)
	}
}

// runActivated runs rkt's verb with files passed to it as systemd passes a
// socket unit's, to its end.
func (r *rktEnv) runActivated(files []*os.File, fds, names string, args ...string) (string, string, int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
	defer cancel()
	c, o, e := r.cmd(ctx, nil, r.runArgs("run", args)...)
	activated(files, fds, names)(c)
	err := c.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return o.String(), e.String(), code
}

// What cannot be matched is refused, in one line naming it, with 254,
// before any app runs.
func TestRktSocketActivationRefusals(t *testing.T) {
	r := newRkt(t)
	tcp, tcpPort := tcpSocket(t, "127.0.0.1", 0)
	twin, _ := tcpSocket(t, "127.0.0.2", tcpPort)
	udp, udpPort := udpSocket(t)
	unixSock, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	must(t, err)
	unixFile, err := unixSock.(*net.UnixListener).File()
	must(t, err)
	defer unixFile.Close()
	img := func(name string, proto string, port int) string {
		return r.aci(name, map[string]any{
			"exec":  probe("sock-serve", "1"),
			"ports": []map[string]any{{"name": "p", "protocol": proto, "port": port, "socketActivated": true}},
		}, nil)
	}
	plain := r.aci("sa-plain", map[string]any{"exec": probe("sock-serve", "1")}, nil)
	cases := []struct {
		name  string
		files []*os.File
		fds   string
		img   string
		want  string
	}{
		{"no app takes it", []*os.File{tcp}, "1", plain, `LISTEN_FDS: passed socket fd 3, tcp port ` + strconv.Itoa(tcpPort) + `: no app has a socket-activated port it matches`},
		{"not activated", nil, "", img("sa-none", "tcp", tcpPort), `socket-activated port "p" (tcp ` + strconv.Itoa(tcpPort) + `): no socket was passed for it`},
		{"another protocol", []*os.File{udp}, "1", img("sa-proto", "tcp", udpPort), `socket-activated port "p" (tcp ` + strconv.Itoa(udpPort) + `): no passed socket is one`},
		{"another port", []*os.File{tcp}, "1", img("sa-port", "tcp", 9), `socket-activated port "p" (tcp 9): no passed socket is one`},
		{"a unix socket", []*os.File{unixFile}, "1", img("sa-unix", "tcp", tcpPort), `passed: fd 3, a socket of address family 1`},
		{"two match", []*os.File{tcp, twin}, "2", img("sa-twin", "tcp", tcpPort), `two passed sockets match it`},
		{"a socket missing", []*os.File{tcp}, "2", img("sa-missing", "tcp", tcpPort), `LISTEN_FDS=2: fd 4: not`},
		{"a bad count", []*os.File{tcp}, "x", img("sa-count", "tcp", tcpPort), `LISTEN_FDS="x": not a number of sockets`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o, e string
			var code int
			if c.files == nil && c.fds == "" {
				o, e, code = r.run(c.img)
			} else {
				o, e, code = r.runActivated(c.files, c.fds, "", c.img)
			}
			if code != 254 || !strings.Contains(e, c.want) {
				t.Fatalf("exit %d, want 254 with %q\nstdout: %s\nstderr: %s", code, c.want, o, e)
			}
			if n := strings.Count(e, "stage1: "); n != 1 {
				t.Errorf("%d lines of the stage1's, want one:\n%s", n, e)
			}
			if strings.Contains(o+e, "sock-serve") {
				t.Errorf("the app ran:\nstdout: %s\nstderr: %s", o, e)
			}
		})
	}
}

// pod1 run, started socket activated, execs the stage1 as the same process,
// as rkt does: its app answers on the passed socket.
func TestLauncherSocketActivation(t *testing.T) {
	data := dataDir(t)
	sock, port := tcpSocket(t, "127.0.0.1", 0)
	img := probeACIDir(t)
	m, err := os.ReadFile(filepath.Join(img, "manifest"))
	must(t, err)
	m = []byte(strings.Replace(string(m), `"user":"0"`, fmt.Sprintf(`"user":"0","ports":[{"name":"web","protocol":"tcp","port":%d,"socketActivated":true}]`, port), 1))
	must(t, os.WriteFile(filepath.Join(img, "manifest"), m, 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin("pod1"), "run", "--dir="+data, "--stage1-path="+stage1ACI(t), "--net=none",
		img, "--exec=/bin/probe", "--", "sock-serve", "1")
	cmd.Env = os.Environ()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	activated([]*os.File{sock}, "1", "ours")(cmd)
	must(t, cmd.Start())
	if a := ask(t, "tcp", port, "hello"); !strings.HasPrefix(a, "web ") || !strings.HasSuffix(a, " hello") {
		t.Errorf("answer %q, want \"web <pid> hello\"", a)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pod1 run: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if !hasLine(stdout.String(), `^sock-serve pid=\d+ fds=1 names=web$`) {
		t.Errorf("stdout: %s", stdout.String())
	}
}

// An app added to a running pod (rkt app add) with a socket-activated port
// is refused, naming the port: the passed sockets went to the pod's apps
// when it started, and none is left for it.
func TestRktSocketActivationAppAdd(t *testing.T) {
	r := newRkt(t)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	r.rkt("fetch", r.aci("sa-added", map[string]any{
		"exec":  probe("sock-serve", "1"),
		"ports": []map[string]any{{"name": "p", "protocol": "tcp", "port": 8080, "socketActivated": true}},
	}, nil))
	// rkt shows the entry point's line with --debug only.
	o, e, code := r.exec(rktTimeout, nil, "--debug", "app", "add", p.UUID, "pod1.test/sa-added", "--name=added")
	want := `app "added": ports: socket-activated port "p" (tcp 8080): an app added to a running pod gets no socket`
	if code == 0 || !strings.Contains(e, want) {
		t.Fatalf("rkt app add: exit %d, want a failure with %q\nstdout: %s\nstderr: %s", code, want, o, e)
	}
	if out := r.rkt("app", "list", "--no-legend", p.UUID); strings.Contains(out, "added") {
		t.Errorf("the refused app is listed:\n%s", out)
	}
}

// The same through systemd-socket-activate, which binds the socket, waits
// for the first connection and execs rkt run as the same process, as
// systemd starts a socket-activated service: the connection made before
// the pod existed is the app's first. With a network and --port naming the
// app's port (80), the socket is the host port's, as in rkt's
// TestSocketActivation.
func TestRktSocketActivationTool(t *testing.T) {
	tool, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatalf("systemd-socket-activate: %v (Debian's systemd package has it)", err)
	}
	for _, hostPort := range []bool{false, true} {
		name := "own port"
		if hostPort {
			name = "host port"
		}
		t.Run(name, func(t *testing.T) {
			r := newRkt(t)
			free, port := tcpSocket(t, "127.0.0.1", 0)
			free.Close() // a free port, for the tool to bind
			imgPort, args := port, []string{}
			if hostPort {
				imgPort, args = 80, []string{"--net=default", "--port=web:" + strconv.Itoa(port)}
			}
			img := r.aci("sa-tool", map[string]any{
				"exec":  probe("sock-serve", "1"),
				"ports": []map[string]any{{"name": "web", "protocol": "tcp", "port": imgPort, "socketActivated": true}},
			}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
			defer cancel()
			c, o, e := r.cmd(ctx, nil, r.runArgs("run", append(args, img))...)
			c.Args = append([]string{tool, "-l", "127.0.0.1:" + strconv.Itoa(port), "--fdname=ours"}, c.Args...)
			c.Path = tool
			must(t, c.Start())
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			var conn net.Conn
			waitFor(t, 10*time.Second, "systemd-socket-activate listening", func() bool {
				conn, err = net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
				return err == nil
			})
			defer conn.Close()
			must(t, conn.SetDeadline(time.Now().Add(eventDeadline)))
			_, err = fmt.Fprintf(conn, "hello\n")
			must(t, err)
			answer, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil || !strings.HasPrefix(answer, "web ") || !strings.HasSuffix(answer, " hello\n") {
				t.Fatalf("answer %q (%v), want \"web <pid> hello\"\nstdout: %s\nstderr: %s", answer, err, o, e)
			}
			if err := <-done; err != nil {
				t.Fatalf("rkt run: %v\nstdout: %s\nstderr: %s", err, o, e)
			}
			if !hasLine(o.String(), `^sock-serve pid=\d+ fds=1 names=web$`) {
				t.Errorf("stdout: %s", o)
			}
		})
	}
}
