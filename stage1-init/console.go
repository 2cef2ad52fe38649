package main

import (
	"fmt"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/console"
)

// The console of an interactive pod whose caller's stdin is a terminal
// (podplan.Pod.Console): the app gets a pseudo-terminal of its own, on
// PID 1's private devpts instance (the attach hub's, which no path leads
// to), as its stdin, stdout, stderr and controlling terminal, its process
// group in the foreground; PID 1 copies between its master and the
// caller's terminal, which is raw meanwhile. Ctrl-C and Ctrl-Z are then
// bytes the app's terminal turns into signals for the app's foreground
// job, as they were under rkt's stage1 (systemd-nspawn's console pty), not
// signals for the stage1's process group, where Ctrl-C means "stop the
// pod". The caller's terminal is never handed to the app: no app can
// push input into it (TIOCSTI) or change its settings.
//
// The caller's window size changes reach the run entry point (the waiter,
// or run), which is in the terminal's foreground process group, as
// SIGWINCH; it passes the signal on to PID 1, which copies the new size to
// the app's terminal.

// consoleDrain bounds the wait for an interactive app's last output once
// its run is over: a descendant that keeps its terminal open must not keep
// the caller's terminal raw.
const consoleDrain = 2 * time.Second

// openConsole makes the app's terminal for a run and joins it to the
// caller's (fds 0 and 1); it returns the terminal's other end, the app's.
// The terminal of the run before is given back first: its settings are
// the ones found.
func (o *appOS) openConsole() (int, error) {
	o.endConsole(true)
	master, slave, err := o.attach.OpenPTY()
	if err != nil {
		return -1, fmt.Errorf("console: %w", err)
	}
	c, err := console.Start(master, 0, 1)
	if err != nil {
		unix.Close(slave)
		return -1, fmt.Errorf("console: the caller's terminal: %w", err)
	}
	if o.console.Swap(c) == nil {
		watchWindowSize(&o.console)
	}
	return slave, nil
}

// endConsole gives the caller's terminal back once the app's output is
// copied: at once when wait is set, else in the background (the
// supervisor does not wait); a later endConsole that waits waits for it.
func (o *appOS) endConsole(wait bool) {
	c := o.console.Load()
	if c == nil {
		return
	}
	if wait {
		c.End(consoleDrain)
	} else {
		go c.End(consoleDrain)
	}
}

// watchWindowSize copies the caller's window size to the app's terminal
// at each SIGWINCH, which only the run entry point sends PID 1: no app can
// name PID 1 (the apps' pid namespace).
func watchWindowSize(cur interface{ Load() *console.Console }) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGWINCH)
	go func() {
		for range ch {
			if c := cur.Load(); c != nil {
				c.Resize()
			}
		}
	}()
}
