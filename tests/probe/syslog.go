package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// syslogProbe runs the subcommands that do what an app's own stdio and
// syslog users do (nginx's logs linked to /dev/stdout, logger, a daemon
// that only syslogs); ok is false for any other command.
func syslogProbe(cmd string, a []string) (ok bool, err error) {
	switch cmd {
	case "reopen":
		// reopen PATH...: opens each PATH for writing, as a program
		// opening its log file does, and writes "via PATH" through it;
		// "reopen PATH ok" or the errno on stdout.
		for _, p := range a {
			fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				_, err = unix.Write(fd, []byte("via "+p+"\n"))
				unix.Close(fd)
			}
			fmt.Printf("reopen %s %s\n", p, errnoOf(err))
		}
	case "reopen-others":
		// reopen-others MARKER: opens for writing fd 1 of every other
		// process whose command line holds MARKER, through its /proc.
		self := strconv.Itoa(os.Getpid())
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return true, err
		}
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
				continue
			}
			b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if !strings.Contains(string(b), arg(a, 0)) {
				continue
			}
			fd, err := unix.Open("/proc/"+e.Name()+"/fd/1", unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				_, err = unix.Write(fd, []byte("intruder\n"))
				unix.Close(fd)
			}
			fmt.Printf("reopen-others %s\n", errnoOf(err))
		}
	case "syslog-others":
		// syslog-others MARKER: sends a message to the /dev/log of
		// every other process whose command line holds MARKER, through
		// its /proc/PID/root.
		self := strconv.Itoa(os.Getpid())
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return true, err
		}
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
				continue
			}
			b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if !strings.Contains(string(b), arg(a, 0)) {
				continue
			}
			_, err := sendSyslog("/proc/"+e.Name()+"/root/dev/log", 1, func(int) string { return "<13>intruder: hello" }, 0, time.Time{})
			fmt.Printf("syslog-others %s\n", errnoOf(err))
		}
	case "syslog":
		// syslog PATH N TEXT [MS]: N datagrams "<13>Dec  6 10:00:00
		// tag: TEXT i" to the socket PATH, as logger and glibc's
		// syslog send them, MS milliseconds apart.
		n, err := strconv.Atoi(arg(a, 1))
		if err != nil {
			return true, err
		}
		gap, _ := strconv.Atoi(arg(a, 3))
		sent, err := sendSyslog(arg(a, 0), n, func(i int) string {
			return fmt.Sprintf("<13>Dec  6 10:00:00 tag: %s %d", arg(a, 2), i)
		}, time.Duration(gap)*time.Millisecond, time.Time{})
		fmt.Printf("syslog %s sent %d %s\n", arg(a, 0), sent, errnoOf(err))
	case "syslog-raw":
		// syslog-raw PATH MSG...: each MSG as one datagram, as it is.
		for i, m := range a[1:] {
			if _, err := sendSyslog(arg(a, 0), 1, func(int) string { return m }, 0, time.Time{}); err != nil {
				fmt.Printf("syslog-raw %d %s\n", i, errnoOf(err))
			}
		}
		fmt.Printf("syslog-raw done\n")
	case "syslog-flood":
		// syslog-flood PATH SECONDS SIZE: datagrams of SIZE bytes as
		// fast as they are taken, for SECONDS; the count on stdout.
		secs, err := strconv.Atoi(arg(a, 1))
		if err != nil {
			return true, err
		}
		size, _ := strconv.Atoi(arg(a, 2))
		pad := make([]byte, max(size, 32))
		for i := range pad {
			pad[i] = 'x'
		}
		sent, err := sendSyslog(arg(a, 0), -1, func(i int) string {
			m := fmt.Sprintf("<11>flood: %d ", i)
			return m + string(pad[:max(len(pad)-len(m), 0)])
		}, 0, time.Now().Add(time.Duration(secs)*time.Second))
		fmt.Printf("syslog-flood sent %d %s\n", sent, errnoOf(err))
	default:
		return false, nil
	}
	return true, nil
}

// sendSyslog sends n datagrams (until the deadline when n < 0) made by msg
// to the socket path, one socket connected once, and returns how many it
// sent.
func sendSyslog(path string, n int, msg func(int) string, gap time.Duration, deadline time.Time) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return 0, err
	}
	// A flood's sends may wait for room; the deadline ends them.
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	i := 0
	for ; n < 0 || i < n; i++ {
		if n < 0 && time.Now().After(deadline) {
			break
		}
		if _, err := unix.Write(fd, []byte(msg(i))); err != nil {
			if n < 0 && (err == unix.EAGAIN || err == unix.EINTR) {
				i--
				continue
			}
			return i, err
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	_ = os.Stdout.Sync()
	return i, nil
}
