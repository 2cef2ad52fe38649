package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// console runs the subcommands about the app's terminal; ok is false for
// any other command. Each report line starts with the subcommand's name.
func console(cmd string, _ []string) (ok bool, err error) {
	switch cmd {
	case "console":
		// What fd 0 is to the app: a terminal, its controlling one
		// (/dev/tty opens), its process group the terminal's
		// foreground one, the name ttyname(3) finds for it, the
		// window size.
		_, ttyErr := unix.IoctlGetTermios(0, unix.TCGETS)
		ctty := false
		if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY, 0); err == nil {
			ctty = true
			unix.Close(fd)
		}
		fg := false
		if pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil {
			fg = pg == unix.Getpgrp()
		}
		size := "none"
		if ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ); err == nil {
			size = fmt.Sprintf("%dx%d", ws.Row, ws.Col)
		}
		fmt.Printf("console tty=%v ctty=%v fg=%v name=%s size=%s\n", ttyErr == nil, ctty, fg, ttyName(0), size)
	case "keys":
		// keys: each SIGINT, SIGQUIT, SIGTSTP and SIGWINCH reported
		// ("keys SIGNAME", "keys winch ROWSxCOLS"), each line of stdin
		// too, until a line "quit".
		ch := make(chan os.Signal, 8)
		signal.Notify(ch, unix.SIGINT, unix.SIGQUIT, unix.SIGTSTP, unix.SIGWINCH)
		go func() {
			for s := range ch {
				if s == unix.SIGWINCH {
					ws, _ := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
					fmt.Printf("keys winch %dx%d\n", ws.Row, ws.Col)
					continue
				}
				fmt.Printf("keys %s\n", unix.SignalName(s.(unix.Signal)))
			}
		}()
		fmt.Printf("keys ready\n")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			fmt.Printf("keys read %q\n", l)
			if l == "quit" {
				return true, nil
			}
		}
		return true, fmt.Errorf("stdin ended")
	case "jobs":
		// jobs: job control as a shell does it. A job (this probe,
		// sleeping) in a process group of its own is made the
		// terminal's foreground; once the terminal stops it (Ctrl-Z),
		// the terminal is taken back, and the job ended.
		signal.Ignore(unix.SIGTTOU)
		c := exec.Command("/proc/self/exe", "sleep", "1h")
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
		if err := c.Start(); err != nil {
			return true, fmt.Errorf("start a job in the foreground: %w", err)
		}
		fmt.Printf("jobs fg %d\n", c.Process.Pid)
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(c.Process.Pid, &ws, unix.WUNTRACED, nil)
			if err != unix.EINTR {
				break
			}
		}
		if !ws.Stopped() {
			return true, fmt.Errorf("the job ended: %v", ws)
		}
		fmt.Printf("jobs stopped %s\n", unix.SignalName(ws.StopSignal()))
		if err := unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp()); err != nil {
			return true, fmt.Errorf("take the terminal back: %w", err)
		}
		pg, _ := unix.IoctlGetInt(0, unix.TIOCGPGRP)
		fmt.Printf("jobs back fg=%v\n", pg == unix.Getpgrp())
		_ = c.Process.Kill()
		_ = c.Wait()
		fmt.Printf("jobs done\n")
	default:
		return false, nil
	}
	return true, nil
}

// ttyName is ttyname(3): the path /proc/self/fd names, if it leads to
// the same terminal; "none" otherwise.
func ttyName(fd int) string {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "none"
	}
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat(p, &b) != nil || a.Dev != b.Dev || a.Ino != b.Ino || a.Rdev != b.Rdev {
		return "none"
	}
	return p
}
