package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
)

// attachClient runs the subcommands that act as a client of an app's
// attach sockets (rkt attach's endpoints), as an intruder would; ok is
// false for any other command. Each ends by itself whether PID 1 accepts
// or refuses the connection, so a test waits for events, not for time.
func attachClient(cmd string, a []string) (ok bool, err error) {
	switch cmd {
	case "attach-send":
		// attach-send PATH TEXT: TEXT and a newline into an input
		// socket, then the end of input; waits for PID 1 to close the
		// connection (at once when refused, after taking TEXT when
		// accepted).
		c, err := net.Dial("unix", arg(a, 0))
		if err != nil {
			fmt.Printf("attach-send error %v\n", err)
			return true, nil
		}
		defer c.Close()
		_, werr := c.Write([]byte(arg(a, 1) + "\n"))
		_ = c.(*net.UnixConn).CloseWrite()
		_, _ = bufio.NewReader(c).ReadString('\n')
		fmt.Printf("attach-send closed (write: %v)\n", werr)
	case "attach-read":
		// attach-read PATH: the first line an output socket gives, or
		// its end (PID 1 closes a refused connection at once).
		c, err := net.Dial("unix", arg(a, 0))
		if err != nil {
			fmt.Printf("attach-read error %v\n", err)
			return true, nil
		}
		defer c.Close()
		l, rerr := bufio.NewReader(c).ReadString('\n')
		if l != "" {
			fmt.Printf("attach-read line %s\n", strings.TrimRight(l, "\r\n"))
		} else {
			fmt.Printf("attach-read closed (%v)\n", rerr)
		}
	default:
		return false, nil
	}
	return true, nil
}
