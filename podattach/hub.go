// Package podattach serves rkt attach: the pod's PID 1 holds the attachable
// ends of the apps' stdio (rkt's per-app "stream" and "tty" modes) and
// serves them on Unix sockets in rkt's layout (stage1/rootfs/rkt/iottymux/
// <app>/: "endpoints", "sock-stdin", "sock-stdout", "sock-stderr",
// "sock-tty"), and the attach entry point (Client) proxies between those
// sockets and the caller of `rkt attach`.
//
// The protocol is rkt's iottymux's: each socket carries one stream's raw
// bytes, input from the client to the app on sock-stdin, output to the
// client on sock-stdout and sock-stderr, both on sock-tty. There is no
// framing. pod1's one addition is first on every connection: the client's
// hello (control.Hello: one byte with a descriptor of its pid namespace),
// which PID 1's peer check reads and no app sees; both ends are handed
// it (New, Attach). The only client is pod1's own attach entry point
// (rkt attach execs it), of the same stage1 as PID 1. PID 1 reads and
// drops what a client sends on an output socket, and reads it only once
// the connection is a client of the stream; the attach entry point uses
// that to send nothing to the app before its output clients exist
// (client.go, registered): each connection is taken in a goroutine of its
// own, and an answer written before its client is taken would go to no
// one.
//
// PID 1 serves it itself, in goroutines, instead of rkt's process per app
// (iottymux under systemd): the output already passes through PID 1, which
// reads every app's stdout and stderr (package podlog), and a process per
// app would cost a Go runtime's memory and one more thing to kill and reap
// at the pod's end. No client can make an app wait: output goes to each
// client through a bounded queue, and a client that falls behind by more
// than maxPending is disconnected.
package podattach

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/safefile"
)

// maxPending is how far an output client may fall behind before it is
// disconnected.
const maxPending = 1 << 20

// flushTimeout bounds how long a client is given to take what is queued
// for it once the stream has ended.
const flushTimeout = 2 * time.Second

// Endpoint names (rkt's).
const (
	EpStdin  = "stdin"
	EpStdout = "stdout"
	EpStderr = "stderr"
	EpTTY    = "tty"
)

// Endpoint is one entry of the endpoints file: rkt's format, the address
// as the stage1's root sees it.
type Endpoint struct {
	Name    string `json:"name"`
	Domain  string `json:"domain"`
	Address string `json:"address"`
}

// Targets is the endpoints file.
type Targets struct {
	Version int        `json:"version"`
	Targets []Endpoint `json:"targets"`
}

// EndpointsFile is the file, in an app's directory, that lists its
// endpoints; it exists once they are served.
const EndpointsFile = "endpoints"

// SocketName is the socket of an endpoint in the app's directory.
func SocketName(ep string) string { return "sock-" + ep }

// AppDir is the app's directory, relative to the pod directory.
func AppDir(app string) string { return path.Join(layout.AttachDir, app) }

// Hub serves the attachable stdio of a pod's apps. It is PID 1's.
type Hub struct {
	mu sync.Mutex
	// dir is where the apps' directories are made: layout.AttachDir
	// (the cwd is the pod directory), or another path to it (PID 1
	// writes through a descriptor it kept from before it pivoted).
	dir  string
	apps map[string]*appHub
	// pts is a directory fd on a devpts instance of PID 1's own (-1
	// before the first terminal).
	pts    int
	auth   func(*net.UnixConn) error
	logf   func(string, ...any)
	closed bool
	// beforeRegister, when set (by tests, before the first Begin), is
	// called with the endpoint of each accepted connection before it is
	// registered: a slow one shows what a client sees when PID 1 takes a
	// connection late.
	beforeRegister func(ep string)
}

// New returns a hub; auth accepts or refuses each connection's peer, and
// reads the client's hello, which precedes the stream's bytes
// (control.Peers.Authenticate).
//
// dir is the attach directory (layout.AttachDir, or "" for it).
func New(dir string, auth func(*net.UnixConn) error, logf func(string, ...any)) *Hub {
	if dir == "" {
		dir = layout.AttachDir
	}
	return &Hub{dir: dir, apps: map[string]*appHub{}, pts: -1, auth: auth, logf: logf}
}

// appHub is one app's endpoints, kept across its runs.
type appHub struct {
	name      string
	dir       int
	listeners []*net.UnixListener
	run       *run
}

// run is one run of an app: the hub's ends of its attachable streams.
type run struct {
	mu sync.Mutex
	// in is where clients' input goes: the stdin pipe's write end or the
	// terminal's master.
	in   *os.File
	inMu sync.Mutex
	out  map[string]*bcast
	// conns are the clients, true for those that get output.
	conns map[net.Conn]bool
	ended bool
}

// Tee is podlog.Tee: what a stream's reader copies its bytes to.
type Tee interface {
	Write(b []byte)
	Close()
}

// Run is what the supervisor needs for one run of an app: the
// descriptors the app gets, and the tees of its logged output.
type Run struct {
	// Fds are the app's fds 0-2 where the hub provides them, else -1.
	Fds [3]int
	// Tees receive the output of the streams the forwarder carries
	// (nil where none).
	Tees [3]Tee
	// Master, when not -1, is a terminal's master the caller carries as
	// the app's output (podlog.Forwarder.Carry) with TTYTee; it is the
	// caller's to close.
	Master int
	TTYTee Tee
	// ours are the hub's copies of the app's ends, closed by Started.
	ours []int
}

// Started closes the hub's copies of the descriptors the app now holds.
func (r *Run) Started() {
	for _, fd := range r.ours {
		unix.Close(fd)
	}
	r.ours = nil
}

// Begin prepares one run of app whose modes are sio: the app's ends, and
// the endpoints, served from the first run on. It returns nil when no
// stream of the app is attachable.
func (h *Hub) Begin(app string, sio podplan.Stdio) (*Run, error) {
	if h == nil || !sio.Attached() {
		return nil, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errors.New("attach: the pod is ending")
	}
	a := h.apps[app]
	if a != nil && a.run != nil {
		h.endLocked(a, true)
	}
	rs := &run{out: map[string]*bcast{}, conns: map[net.Conn]bool{}}
	r := &Run{Fds: [3]int{-1, -1, -1}, Master: -1}
	fail := func(err error) (*Run, error) {
		r.Started()
		if rs.in != nil {
			rs.in.Close()
		}
		if r.Master >= 0 {
			unix.Close(r.Master)
		}
		return nil, fmt.Errorf("attach: %w", err)
	}
	modes := [3]string{sio.Stdin, sio.Stdout, sio.Stderr}
	var eps []string
	if modes[0] == podplan.StdioTTY || modes[1] == podplan.StdioTTY || modes[2] == podplan.StdioTTY {
		master, slave, err := h.openPTY()
		if err != nil {
			return fail(err)
		}
		r.ours = append(r.ours, slave)
		// Our side of the terminal: one descriptor for the clients'
		// input, another for the output the forwarder reads (both
		// non-blocking, served by the runtime's poller).
		in := os.NewFile(uintptr(master), app+"-tty")
		rs.in = in
		out, err := unix.FcntlInt(uintptr(master), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		r.Master = out
		b := newBcast()
		rs.out[EpTTY] = b
		r.TTYTee = b
		for i, m := range modes {
			if m == podplan.StdioTTY {
				r.Fds[i] = slave
			}
		}
		eps = append(eps, EpTTY)
	}
	if modes[0] == podplan.StdioStream {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return fail(err)
		}
		// Only our end is non-blocking (its own open file
		// description): a client writing more than the app reads waits
		// in its own goroutine.
		if err := unix.SetNonblock(p[1], true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return fail(err)
		}
		r.ours = append(r.ours, p[0])
		r.Fds[0] = p[0]
		rs.in = os.NewFile(uintptr(p[1]), app+"-stdin")
		eps = append(eps, EpStdin)
	}
	for i, ep := range []string{"", EpStdout, EpStderr} {
		if i > 0 && modes[i] == podplan.StdioStream {
			b := newBcast()
			rs.out[ep] = b
			r.Tees[i] = b
			eps = append(eps, ep)
		}
	}
	if a == nil {
		var err error
		if a, err = h.serve(app, eps); err != nil {
			return fail(err)
		}
		h.apps[app] = a
	}
	a.run = rs
	return r, nil
}

// End closes the current run of app (its process has exited): its input
// side and input clients are closed; output clients get the app's last
// bytes and are disconnected when the forwarder has carried them (the
// stream's end), as rkt attach ends when the app does.
func (h *Hub) End(app string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.apps[app]; a != nil && a.run != nil {
		h.endLocked(a, false)
	}
}

// endLocked ends a's run. Output clients are left to their streams, which
// the forwarder closes once it has carried the app's last bytes, unless
// all (the hub closes).
func (h *Hub) endLocked(a *appHub, all bool) {
	rs := a.run
	a.run = nil
	rs.mu.Lock()
	rs.ended = true
	var conns []net.Conn
	for c, output := range rs.conns {
		if all || !output {
			conns = append(conns, c)
		}
	}
	rs.mu.Unlock()
	if rs.in != nil {
		rs.in.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	if all {
		for _, b := range rs.out {
			b.Close()
		}
	}
}

// Remove stops serving app (rkt app rm): its run ended, its sockets and
// directory removed.
func (h *Hub) Remove(app string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.apps[app]
	if a == nil {
		return
	}
	delete(h.apps, app)
	h.dropLocked(a)
	_ = os.RemoveAll(path.Join(h.dir, app))
}

func (h *Hub) dropLocked(a *appHub) {
	if a.run != nil {
		h.endLocked(a, true)
	}
	for _, l := range a.listeners {
		l.Close()
	}
	unix.Close(a.dir)
}

// Close ends every run and closes every socket and descriptor of the hub:
// nothing of it outlives PID 1's loop. The directories stay, for rkt gc.
func (h *Hub) Close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for name, a := range h.apps {
		h.dropLocked(a)
		delete(h.apps, name)
	}
	if h.pts >= 0 {
		unix.Close(h.pts)
		h.pts = -1
	}
}

// serve creates the app's directory, listens on its endpoints and writes
// the endpoints file last: once it exists, every socket accepts.
func (h *Hub) serve(app string, eps []string) (*appHub, error) {
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return nil, err
	}
	dir := path.Join(h.dir, app)
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	a := &appHub{name: app, dir: fd}
	t := Targets{Version: 1}
	for _, ep := range eps {
		// Through the directory's descriptor: the path stays short of
		// the 108 bytes a socket address may hold, whatever the name
		// of the app.
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: FdPath(fd, SocketName(ep)), Net: "unix"})
		if err != nil {
			h.dropLocked(a)
			return nil, err
		}
		l.SetUnlinkOnClose(false)
		a.listeners = append(a.listeners, l)
		go h.accept(a, ep, l)
		t.Targets = append(t.Targets, Endpoint{Name: ep, Domain: "unix", Address: "/" + path.Join(layout.AttachDirIn, app, SocketName(ep))})
	}
	b, err := json.Marshal(&t)
	if err != nil {
		h.dropLocked(a)
		return nil, err
	}
	// rkt attach reads it while the app runs, which a host crash ends:
	// atomic, not durable.
	if err := safefile.WriteFile(FdPath(fd, EndpointsFile), append(b, '\n'), 0o600, safefile.Volatile); err != nil {
		h.dropLocked(a)
		return nil, err
	}
	return a, nil
}

// FdPath names name in the directory open as fd.
func FdPath(fd int, name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", fd, name) }

func (h *Hub) accept(a *appHub, ep string, l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				h.logf("attach: app %q: %s: %v", a.name, ep, err)
			}
			return
		}
		// Checked in a goroutine of its own: the check waits for the
		// client's hello, which a client that says nothing would
		// otherwise hold every later connection up for.
		go h.take(a, ep, c)
	}
}

// take checks the peer of a connection to a's endpoint ep and makes it a
// client of the app's current run.
func (h *Hub) take(a *appHub, ep string, c *net.UnixConn) {
	if err := h.auth(c); err != nil {
		h.logf("attach: app %q: refused a connection: %v", a.name, err)
		_ = c.Close()
		return
	}
	if h.beforeRegister != nil {
		h.beforeRegister(ep)
	}
	h.mu.Lock()
	rs := a.run
	h.mu.Unlock()
	if rs == nil || !rs.add(c, ep != EpStdin) {
		// Between runs: nothing to attach to.
		_ = c.Close()
		return
	}
	switch ep {
	case EpStdin:
		rs.input(c, nil)
	case EpTTY:
		rs.input(c, rs.out[EpTTY].add(c))
	default:
		rs.discard(c, rs.out[ep].add(c))
	}
}

// add registers a client of the run; false once the run has ended.
func (rs *run) add(c net.Conn, output bool) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.ended {
		return false
	}
	rs.conns[c] = output
	return true
}

func (rs *run) forget(c net.Conn, oc *outClient) {
	if oc != nil {
		oc.kill()
	}
	rs.mu.Lock()
	delete(rs.conns, c)
	rs.mu.Unlock()
	c.Close()
}

// input copies a client's bytes to the app. A write that waits (the app
// reads nothing) holds this client only; the input of two clients is not
// interleaved within one read's worth.
func (rs *run) input(c net.Conn, oc *outClient) {
	defer rs.forget(c, oc)
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			rs.inMu.Lock()
			_, werr := rs.in.Write(buf[:n])
			rs.inMu.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// discard reads an output client until it goes away, so that a client
// that disconnects is forgotten even while the app writes nothing.
func (rs *run) discard(c net.Conn, oc *outClient) {
	_, _ = io.Copy(io.Discard, c)
	rs.forget(c, oc)
}

// OpenPTY opens a new pseudo-terminal on the hub's devpts instance, as
// openPTY: the console of an interactive pod's app (stage1-init).
func (h *Hub) OpenPTY() (master, slave int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.openPTY()
}

// openPTY opens a new pseudo-terminal on the hub's own devpts instance:
// its master, non-blocking, and its peer. The instance is a detached mount
// of PID 1's: no path leads to it, so no app can open its terminals.
func (h *Hub) openPTY() (master, slave int, err error) {
	if h.pts < 0 {
		if h.pts, err = mountDevpts(); err != nil {
			return -1, -1, fmt.Errorf("devpts: %w", err)
		}
	}
	return OpenPTYOn(h.pts)
}

// OpenPTYOn opens a new pseudo-terminal on the devpts instance open as
// pts: its master, non-blocking, and its peer, opened from the master
// (TIOCGPTPEER), never by a path.
func OpenPTYOn(pts int) (master, slave int, err error) {
	master, err = unix.Openat(pts, "ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("open ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(master)
		return -1, -1, fmt.Errorf("unlock pty: %w", err)
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		unix.Close(master)
		return -1, -1, fmt.Errorf("open pty peer: %w", errno)
	}
	return master, int(r), nil
}

func mountDevpts() (int, error) {
	fsfd, err := unix.Fsopen("devpts", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fsfd)
	for k, v := range map[string]string{"mode": "0620", "ptmxmode": "0600"} {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return -1, fmt.Errorf("%s: %w", k, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, err
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
}
