package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Looking at processes from the host: the tree below one of ours, their
// names and states, and the moment one exits.

// children lists a process's direct children.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// descendants lists every process below pid, depth first.
func descendants(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// comm is a process's command name ("" once it is gone).
func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// procState is the state letter of a process ("" once it is reaped).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 {
		return f[0]
	}
	return ""
}

// waitUntil polls cond every step until it holds or timeout passes.
func waitUntil(timeout, step time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(step)
	}
	return nil
}

// findProbe waits for a live descendant of c (or of pid root when c is
// nil) running the probe, the app of the measurements that need one; it
// gives up at once if c exits.
func findProbe(c *child, root int, timeout time.Duration) (int, error) {
	const name = "probe"
	var found int
	err := waitUntil(timeout, time.Millisecond, name+" to run", func() bool {
		if c != nil && c.exited() {
			return true
		}
		for _, p := range descendants(root) {
			if comm(p) == name && procState(p) != "Z" {
				found = p
				return true
			}
		}
		return false
	})
	if err == nil && found == 0 {
		err = fmt.Errorf("exited %d before %s ran", c.code(), name)
	}
	return found, err
}

// waitOutput waits until the child has printed want.
func (c *child) waitOutput(want string, timeout time.Duration) error {
	return waitUntil(timeout, 200*time.Microsecond, fmt.Sprintf("%q in the output", want), func() bool {
		if c.exited() {
			return true
		}
		return strings.Contains(c.output(1<<16), want)
	})
}

// pidfdExit returns a channel that gets the time pid exits. pidfd polling
// sees the exit itself (the process turning zombie), not its reaping by a
// parent we are not.
func pidfdExit(pid int) (<-chan time.Time, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	ch := make(chan time.Time, 1)
	go func() {
		runtime.LockOSThread()
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for i := 0; i < 10; i++ {
			n, err := unix.Poll(fds, 30_000)
			if errors.Is(err, unix.EINTR) || err == nil && n == 0 {
				continue
			}
			ch <- time.Now()
			return
		}
	}()
	return ch, nil
}
