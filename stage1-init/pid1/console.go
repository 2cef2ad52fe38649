package pid1

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/console"
	"github.com/pod1/pod1/podattach"
)

// The console of an interactive pod whose caller's stdin is a terminal
// (podplan.Pod.Console): the app gets a pseudo-terminal of its own, on
// a devpts instance of the console's (consolePts), which the app sees as
// its /dev/pts and no other app sees at all, as its stdin, stdout, stderr and controlling terminal, its process
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
	open := o.attach.OpenPTY
	if consolePts >= 0 {
		open = func() (int, int, error) { return podattach.OpenPTYOn(consolePts) }
	}
	master, slave, err := open()
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

// consolePts is the devpts instance of the pod's console, -1 before
// attachConsolePts: the app's terminal is made on it, and the app's set-up
// puts a copy of it on the app's /dev/pts (appexec.Spec.ConsolePts), so
// that the terminal is /dev/pts/N in the app, as ttyname(3) reads it. It
// is the app's alone: the attach hub's instance serves the other apps'.
var consolePts = -1

// attachConsolePts makes the console's devpts instance and puts it at
// appexec.ConsolePts under root (PID 1's new root, being built), where
// the app's set-up finds it; consolePts keeps it for PID 1.
func attachConsolePts(root string) error {
	fsfd, err := unix.Fsopen("devpts", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("console devpts: %w", err)
	}
	defer unix.Close(fsfd)
	// As the apps' own instances (appexec's /dev/pts): the app may make
	// terminals of its own there too.
	for k, v := range map[string]string{"mode": "0620", "ptmxmode": "0666", "gid": "5"} {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return fmt.Errorf("console devpts: %s: %w", k, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("console devpts: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("console devpts: %w", err)
	}
	dst := root + appexec.ConsolePts
	if err := unix.Mkdir(dst, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		unix.Close(mfd)
		return fmt.Errorf("console devpts: %w", err)
	}
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		unix.Close(mfd)
		return fmt.Errorf("console devpts: %w", err)
	}
	consolePts = mfd
	return nil
}
