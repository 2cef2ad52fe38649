// Package netexec runs net-setup, the stage1's CNI binary (stage1-net),
// for run (the pod's networks) and gc (their teardown).
package netexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// ErrReported is a failure whose one line the child already printed.
var ErrReported = errors.New("reported")

// netSetupPath is the stage1's CNI binary (layout.NetSetupIn), next to
// this one in the stage1 rootfs. It is exec'd only when a pod asks for
// networks (run) or has network state (gc): no other process of the
// stage1 links libcni, so --net=none and --net=host pay nothing for
// networking.
func netSetupPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", layout.NetSetupIn, err)
	}
	return filepath.Join(filepath.Dir(exe), layout.NetSetupIn), nil
}

// Run runs net-setup with args in the pod directory and waits for
// it. It dies with the calling thread (run's, locked), so a run killed
// during setup leaves no setup going on behind gc's back.
func Run(podDir string, args []string) error {
	bin, err := netSetupPath()
	if err != nil {
		return err
	}
	pid, err := syscall.ForkExec(bin, append([]string{layout.NetSetupIn}, args...), &syscall.ProcAttr{
		Dir:   podDir,
		Env:   os.Environ(),
		Files: []uintptr{os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", layout.NetSetupIn, err)
	}
	ws := waitPid(pid)
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return nil
	case ws.Exited() && ws.ExitStatus() == status.CodeStage1Failure:
		return ErrReported
	case ws.Signaled():
		return fmt.Errorf("failed to setup network: %s killed by signal %v", layout.NetSetupIn, ws.Signal())
	default:
		return fmt.Errorf("failed to setup network: %s exited %d", layout.NetSetupIn, ws.ExitStatus())
	}
}

// waitPid waits for our child pid, net-setup, and returns how it ended. It
// is the only child run and gc wait for (PID 1 and the lock keeper are the
// waiter's children), so this competes with no other reaper.
func waitPid(pid int) unix.WaitStatus {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			return ws
		}
	}
}
