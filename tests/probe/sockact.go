package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sockServe is "sock-serve [N]": the app of a socket-activated pod. It
// takes its sockets as sd_listen_fds(3) says (LISTEN_PID its own pid,
// LISTEN_FDS of them from fd 3, LISTEN_FDNAMES), reports them ("sock-serve
// pid=P fds=N names=A:B"), then answers N requests (default 1) on any of
// them: on a stream socket it accepts a connection and answers its first
// line, on a datagram socket it answers a datagram, each answer being
// "<name> <pid> <what came>".
func sockServe(a []string) error {
	pid := os.Getpid()
	if v := os.Getenv("LISTEN_PID"); v != strconv.Itoa(pid) {
		return fmt.Errorf("not activated: LISTEN_PID=%q, pid %d", v, pid)
	}
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if err != nil || n <= 0 {
		return fmt.Errorf("LISTEN_FDS=%q", os.Getenv("LISTEN_FDS"))
	}
	names := strings.Split(os.Getenv("LISTEN_FDNAMES"), ":")
	if len(names) != n {
		return fmt.Errorf("LISTEN_FDNAMES=%q for %d sockets", os.Getenv("LISTEN_FDNAMES"), n)
	}
	fmt.Printf("sock-serve pid=%d fds=%d names=%s\n", pid, n, strings.Join(names, ":"))
	count := 1
	if v := arg(a, 0); v != "" {
		if count, err = strconv.Atoi(v); err != nil {
			return err
		}
	}
	pfds := make([]unix.PollFd, n)
	for i := range pfds {
		pfds[i] = unix.PollFd{Fd: int32(3 + i), Events: unix.POLLIN}
	}
	for count > 0 {
		if _, err := unix.Poll(pfds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return err
		}
		for i := range pfds {
			if pfds[i].Revents == 0 || count == 0 {
				continue
			}
			if err := answer(3+i, names[i], pid); err != nil {
				return err
			}
			count--
		}
	}
	return nil
}

// answer serves one request on the socket fd.
func answer(fd int, name string, pid int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return err
	}
	buf := make([]byte, 512)
	if typ == unix.SOCK_DGRAM {
		m, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		return unix.Sendto(fd, fmt.Appendf(nil, "%s %d %s\n", name, pid, strings.TrimSpace(string(buf[:m]))), 0, from)
	}
	c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(c)
	got := ""
	for !strings.Contains(got, "\n") && len(got) < 512 {
		m, err := unix.Read(c, buf)
		if err != nil || m <= 0 {
			break
		}
		got += string(buf[:m])
	}
	_, err = unix.Write(c, fmt.Appendf(nil, "%s %d %s\n", name, pid, strings.TrimSpace(got)))
	return err
}
