package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// stdio runs the subcommands about the app's standard descriptors; ok is
// false for any other command.
func stdio(cmd string, a []string) (ok bool, err error) {
	switch cmd {
	case "stdio":
		// What each of fds 0-2 is: its file type and device.
		var parts []string
		for fd := 0; fd < 3; fd++ {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				parts = append(parts, fmt.Sprintf("%d=closed", fd))
				continue
			}
			kind := map[uint32]string{unix.S_IFCHR: "chr", unix.S_IFIFO: "fifo", unix.S_IFREG: "reg", unix.S_IFSOCK: "sock"}[st.Mode&unix.S_IFMT]
			parts = append(parts, fmt.Sprintf("%d=%s:%d:%d", fd, kind, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		}
		fmt.Printf("stdio %s\n", strings.Join(parts, " "))
	case "read-stdin":
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		if err != nil {
			return true, err
		}
		fmt.Printf("stdin %q\n", b)
	case "out":
		// out FD N TEXT: N lines "TEXT <i>" on FD, one write each.
		fd, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return true, err
		}
		n, err := strconv.Atoi(arg(a, 1))
		if err != nil {
			return true, err
		}
		for i := 0; i < n; i++ {
			if _, err := unix.Write(fd, []byte(fmt.Sprintf("%s %d\n", arg(a, 2), i))); err != nil {
				return true, err
			}
		}
	case "interleave":
		// interleave N: "out <i>" on stdout then "err <i>" on stderr,
		// N times, one write each, as fast as they are taken.
		n, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return true, err
		}
		for i := 0; i < n; i++ {
			if _, err := unix.Write(1, []byte(fmt.Sprintf("out %d\n", i))); err != nil {
				return true, err
			}
			if _, err := unix.Write(2, []byte(fmt.Sprintf("err %d\n", i))); err != nil {
				return true, err
			}
		}
	case "echo-lines":
		// echo-lines: a prompt, then each line of stdin back on stdout
		// (and on stderr) with whether stdin is a terminal and the
		// controlling one, until EOF.
		_, ttyErr := unix.IoctlGetTermios(0, unix.TCGETS)
		ctty := false
		if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY, 0); err == nil {
			ctty = true
			unix.Close(fd)
		}
		fmt.Printf("Enter text:\n")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Printf("got %s tty=%v ctty=%v\n", sc.Text(), ttyErr == nil, ctty)
			fmt.Fprintf(os.Stderr, "err %s\n", sc.Text())
		}
	case "lines":
		// lines N SIZE FILE: N lines of SIZE bytes (newline included) to
		// stdout, one write each, as fast as they are taken; then
		// "<N> <nanoseconds>" to FILE (the bench's app-side rate).
		n, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return true, err
		}
		size, err := strconv.Atoi(arg(a, 1))
		if err != nil || size < 2 {
			return true, fmt.Errorf("lines: size %q", arg(a, 1))
		}
		line := []byte(strings.Repeat("x", size-1) + "\n")
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if _, err := unix.Write(1, line); err != nil {
				return true, err
			}
		}
		d := time.Since(t0)
		return true, os.WriteFile(arg(a, 2), []byte(fmt.Sprintf("%d %d\n", n, d.Nanoseconds())), 0o644)
	case "raw":
		// raw FD TEXT: TEXT as it is, no newline added.
		fd, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return true, err
		}
		_, err = unix.Write(fd, []byte(arg(a, 1)))
		return true, err
	default:
		return false, nil
	}
	return true, nil
}
