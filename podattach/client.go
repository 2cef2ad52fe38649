package podattach

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// maxEndpointsFile bounds the endpoints file a client reads.
const maxEndpointsFile = 64 << 10

// dialTimeout bounds each connection to an endpoint.
const dialTimeout = 15 * time.Second

// Selection is what a client attaches to (rkt attach --mode): every
// endpoint the app has when Auto, else those named.
type Selection struct {
	Auto                                 bool
	TTYIn, TTYOut, Stdin, Stdout, Stderr bool
}

// openAppDir opens app's directory below the cwd (the pod directory)
// without following a symlink on the way.
func openAppDir(app string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, AppDir(app), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("app %q has no attachable stdio (not started, or none of its streams is tty or stream): %w", app, err)
	}
	return fd, nil
}

// ReadTargets reads the endpoints file in the app's directory dir.
func readTargets(dir int, app string) (*Targets, error) {
	fd, err := unix.Openat(dir, EndpointsFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("app %q is not attachable yet: %w", app, err)
	}
	f := os.NewFile(uintptr(fd), EndpointsFile)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEndpointsFile))
	if err != nil {
		return nil, err
	}
	var t Targets
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("app %q: endpoints: %w", app, err)
	}
	for _, ep := range t.Targets {
		switch ep.Name {
		case EpStdin, EpStdout, EpStderr, EpTTY:
		default:
			return nil, fmt.Errorf("app %q: endpoints: unknown endpoint %q", app, ep.Name)
		}
	}
	return &t, nil
}

// List writes app's endpoints as rkt attach --mode=list prints them.
func List(app string, w io.Writer) error {
	dir, err := openAppDir(app)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	t, err := readTargets(dir, app)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(t, "", "    ")
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Attach connects to app's endpoints that sel selects and copies: in to
// the app's stdin or terminal, its output to out (stdout, terminal) and
// errOut (stderr). hello is sent first on each connection (the caller's:
// control.Hello, which PID 1's peer check reads). It returns when an
// output stream ends (the app's run is over) or, with no output selected,
// when in does.
func Attach(app string, sel Selection, hello func(net.Conn) error, in io.Reader, out, errOut io.Writer) error {
	dir, err := openAppDir(app)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	t, err := readTargets(dir, app)
	if err != nil {
		return err
	}
	type copy struct {
		dst io.Writer
		src io.Reader
	}
	var inputs, outputs []copy
	// syncs are the output-only connections to stdout and stderr. Not
	// the terminal's: PID 1 takes what a client sends there as the app's
	// input (a synchronising byte would be typed into it), and registers
	// it as an output client before it reads, so that input sent on it is
	// answered on it.
	var syncs []net.Conn
	for _, ep := range t.Targets {
		var wantIn, wantOut bool
		var dst io.Writer
		switch ep.Name {
		case EpStdin:
			wantIn = sel.Auto || sel.Stdin
		case EpStdout:
			wantOut, dst = sel.Auto || sel.Stdout, out
		case EpStderr:
			wantOut, dst = sel.Auto || sel.Stderr, errOut
		case EpTTY:
			wantIn, wantOut, dst = sel.Auto || sel.TTYIn, sel.Auto || sel.TTYOut, out
		}
		if !wantIn && !wantOut {
			continue
		}
		c, err := net.DialTimeout("unix", FdPath(dir, SocketName(ep.Name)), dialTimeout)
		if err != nil {
			return fmt.Errorf("app %q: %s: %w", app, ep.Name, err)
		}
		defer c.Close()
		if err := hello(c); err != nil {
			return fmt.Errorf("app %q: %s: %w", app, ep.Name, err)
		}
		if wantIn {
			inputs = append(inputs, copy{c, in})
		}
		if wantOut {
			outputs = append(outputs, copy{dst, c})
			if ep.Name != EpTTY {
				syncs = append(syncs, c)
			}
		}
	}
	if len(inputs)+len(outputs) == 0 {
		return fmt.Errorf("app %q has none of the endpoints asked for", app)
	}
	if len(inputs) > 0 {
		// Nothing is sent to the app before PID 1 has taken each output
		// connection (registered): a connect returns once the kernel has
		// queued it, and PID 1 accepts each endpoint in a goroutine of
		// its own, so the app's answer to input sent at once could be
		// written before the output client exists, to no one.
		for _, c := range syncs {
			if err := registered(c); err != nil {
				return fmt.Errorf("app %q: %w", app, err)
			}
		}
	}
	done := make(chan error, len(inputs)+len(outputs))
	for _, cp := range outputs {
		go func() {
			_, err := io.Copy(cp.dst, cp.src)
			done <- err
		}()
	}
	// One reader of in: with two input endpoints (never, as served) the
	// first would get everything.
	if len(inputs) > 0 {
		cp := inputs[0]
		go func() {
			_, err := io.Copy(cp.dst, cp.src)
			if len(outputs) == 0 {
				done <- err
			}
		}()
	}
	err = <-done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// syncByte is what registered sends on an output-only connection: PID 1
// reads and drops whatever a client sends there (rkt's iottymux
// protocol has the client send nothing on it), and reads it only once
// it has made the connection a client of the stream.
const syncByte = 0

// registered waits until PID 1 has taken the output connection c: it
// sends syncByte and waits for PID 1 to have read it, which the socket's
// unread bytes (SIOCOUTQ) show. The protocol is unchanged: the byte is
// one PID 1 drops. A connection PID 1 closed unread (the run ended) also
// frees what was queued; one it never takes is given up on after
// dialTimeout.
func registered(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	if _, err := uc.Write([]byte{syncByte}); err != nil {
		// Closed by PID 1 already: the run is over, and the output's
		// end says so.
		return nil
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(dialTimeout)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		var n int
		var ierr error
		if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
			return err
		}
		if ierr != nil {
			return fmt.Errorf("output connection: SIOCOUTQ: %w", ierr)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("output connection not taken within %v", dialTimeout)
		}
		time.Sleep(wait)
	}
}
