package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/pod1/pod1/control"
)

// attachClient runs the subcommands that act as a client of an app's
// attach sockets (rkt attach's endpoints) or of a pod's control socket, as
// an intruder would; ok is false for any other command. Each ends by
// itself whether PID 1 accepts or refuses the connection, so a test waits
// for events, not for time.
//
// The -hello variants first send the hello pod1's own clients send
// (control.SendHello: a descriptor of the caller's pid namespace), the
// best an intruder holding its own namespace can do; the others speak the socket's
// protocol bare. Each report line starts with the subcommand's name.
func attachClient(cmd string, a []string) (ok bool, err error) {
	hello := strings.HasSuffix(cmd, "-hello")
	// dial connects to PATH and, for a -hello variant, says hello; a
	// failure is reported, and nil returned.
	dial := func() net.Conn {
		c, err := net.Dial("unix", arg(a, 0))
		if err != nil {
			fmt.Printf("%s error %v\n", cmd, err)
			return nil
		}
		if hello {
			if err := control.SendHello(c); err != nil {
				// PID 1 closed the connection already: what the
				// rest reports.
				fmt.Printf("%s hello failed: %v\n", cmd, err)
			}
		}
		return c
	}
	switch strings.TrimSuffix(cmd, "-hello") {
	case "attach-send":
		// attach-send PATH TEXT: TEXT and a newline into an input
		// socket, then the end of input; waits for PID 1 to close the
		// connection (at once when refused, after taking TEXT when
		// accepted).
		c := dial()
		if c == nil {
			return true, nil
		}
		defer c.Close()
		_, werr := c.Write([]byte(arg(a, 1) + "\n"))
		_ = c.(*net.UnixConn).CloseWrite()
		_, _ = bufio.NewReader(c).ReadString('\n')
		fmt.Printf("%s closed (write: %v)\n", cmd, werr)
	case "attach-read":
		// attach-read PATH: the first line an output socket gives, or
		// its end (PID 1 closes a refused connection at once).
		c := dial()
		if c == nil {
			return true, nil
		}
		defer c.Close()
		l, rerr := bufio.NewReader(c).ReadString('\n')
		if l != "" {
			fmt.Printf("%s line %s\n", cmd, strings.TrimRight(l, "\r\n"))
		} else {
			fmt.Printf("%s closed (%v)\n", cmd, rerr)
		}
	case "control-op":
		// control-op PATH OP APP: asks for an app operation on a
		// pod's control socket and reports PID 1's answer line, or the
		// connection's end without one.
		c := dial()
		if c == nil {
			return true, nil
		}
		defer c.Close()
		req, _ := json.Marshal(map[string]string{"op": arg(a, 1), "app": arg(a, 2)})
		_, _ = c.Write(append(req, '\n'))
		l, rerr := bufio.NewReader(c).ReadString('\n')
		if l != "" {
			fmt.Printf("%s answer %s\n", cmd, strings.TrimSpace(l))
		} else {
			fmt.Printf("%s closed (%v)\n", cmd, rerr)
		}
	default:
		return false, nil
	}
	return true, nil
}
