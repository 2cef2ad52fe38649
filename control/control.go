// Package control owns the channel through which the host asks a running
// pod's PID 1 to act on its apps (rkt's app add/start/stop/rm): a Unix
// socket in the stage1's own directory of the pod, which no app can reach
// by path, and on which PID 1 accepts only root peers of the pid namespace
// run was started in, the host's (peer.go). An app, whatever its
// capabilities, is a member of the pod's pid namespace and cannot leave
// it, nor can a process of another pod open the host's: either is refused
// even if it reached the socket.
package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/pod1/pod1/layout"
)

// Operations.
const (
	OpAdd   = "add"
	OpStart = "start"
	OpStop  = "stop"
	OpRm    = "rm"
)

// Request is one app operation.
type Request struct {
	Op  string `json:"op"`
	App string `json:"app"`
	// AppSpec is the resolved app, for OpAdd (a podspec.App as JSON).
	AppSpec json.RawMessage `json:"appSpec,omitempty"`
	Force   bool            `json:"force,omitempty"`
}

// Response is PID 1's answer, sent when the operation is done or failed.
type Response struct {
	// Code is the entry point's exit code: 0 done (Error may then say
	// why there was nothing to do), 254 failed.
	Code  int    `json:"code"`
	Error string `json:"error,omitempty"`
}

// Exit codes in a Response.
const (
	CodeOK     = 0
	CodeFailed = 254
)

// Do sends req to the pod whose directory is the cwd, once it knows PID 1
// serves the socket (Hello), and waits up to timeout for the answer.
func Do(req *Request, timeout time.Duration) (*Response, error) {
	c, err := net.DialTimeout("unix", layout.ControlSocket, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to the pod: %w", err)
	}
	defer c.Close()
	if timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(timeout))
	}
	if err := Hello(c, "."); err != nil {
		return nil, fmt.Errorf("send %s: %w", req.Op, err)
	}
	if err := writeMsg(c, req); err != nil {
		return nil, fmt.Errorf("send %s: %w", req.Op, err)
	}
	var resp Response
	if err := readMsg(c, &resp); err != nil {
		return nil, fmt.Errorf("await %s: %w", req.Op, err)
	}
	return &resp, nil
}

func writeMsg(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.Write(append(b, '\n'))
	return err
}

// readMsg reads one request or response line: at most a pod file's worth
// (layout.MaxFileSize), which an app's spec, the largest, is.
func readMsg(c net.Conn, v any) error {
	r := bufio.NewReaderSize(c, 64<<10)
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return err
		}
		line = append(line, chunk...)
		if len(line) > layout.MaxFileSize {
			return errors.New("message too long")
		}
		if !isPrefix {
			break
		}
	}
	return json.Unmarshal(line, v)
}

// Call is a request received by PID 1, to be answered once.
type Call struct {
	Req  Request
	conn net.Conn
}

// Reply answers the call and closes it.
func (c *Call) Reply(resp Response) {
	_ = writeMsg(c.conn, &resp)
	_ = c.conn.Close()
}

// Listen makes the control socket at layout.ControlSocket (relative to the cwd).
// PID 1 does it before it pivots: in its own root the directory holding
// the socket is read-only.
func Listen() (*net.UnixListener, error) {
	_ = os.Remove(layout.ControlSocket)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: layout.ControlSocket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", layout.ControlSocket, err)
	}
	if err := os.Chmod(layout.ControlSocket, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve delivers every request on l whose peer peers accepts on calls.
// Errors are logged with logf. The function it returns closes l.
func Serve(l *net.UnixListener, calls chan<- *Call, peers *Peers, logf func(string, ...any)) func() {
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					logf("control: accept: %v", err)
				}
				return
			}
			go receive(c, calls, peers, logf)
		}
	}()
	return func() { l.Close() }
}

func receive(c *net.UnixConn, calls chan<- *Call, peers *Peers, logf func(string, ...any)) {
	if err := peers.Authenticate(c); err != nil {
		logf("control: refused a connection: %v", err)
		_ = writeMsg(c, &Response{Code: CodeFailed, Error: err.Error()})
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req Request
	if err := readMsg(c, &req); err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	calls <- &Call{Req: req, conn: c}
}
