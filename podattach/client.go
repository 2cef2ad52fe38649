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
// errOut (stderr). It returns when an output stream ends (the app's run is
// over) or, with no output selected, when in does.
func Attach(app string, sel Selection, in io.Reader, out, errOut io.Writer) error {
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
		if wantIn {
			inputs = append(inputs, copy{c, in})
		}
		if wantOut {
			outputs = append(outputs, copy{dst, c})
		}
	}
	if len(inputs)+len(outputs) == 0 {
		return fmt.Errorf("app %q has none of the endpoints asked for", app)
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
