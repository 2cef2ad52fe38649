//go:build !pod1init

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/network/netinfo"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/status"
)

// The stage1's CNI binary (layout.NetSetupIn), next to this one in the
// stage1 rootfs, is exec'd only when a pod asks for networks (run) or has
// network state (gc): no other process of the stage1 links libcni, so
// --net=none and --net=host pay nothing for networking.

// errReported is a failure whose one line the child already printed.
var errReported = errors.New("reported")

// wantsNetworks reports whether --net names CNI networks: anything but
// host, and none (which, as in rkt, means loopback only whatever else is
// listed).
func wantsNetworks(nets []string) bool {
	want := false
	for _, n := range nets {
		name, _, _ := strings.Cut(n, ":")
		switch name {
		case "none", "host":
			return false
		default:
			want = true
		}
	}
	return want
}

func netSetupPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", layout.NetSetupIn, err)
	}
	return filepath.Join(filepath.Dir(exe), layout.NetSetupIn), nil
}

// runNetSetup runs net-setup with args in the pod directory and waits for
// it. It dies with the calling thread (run's, locked), so a run killed
// during setup leaves no setup going on behind gc's back.
func runNetSetup(podDir string, args []string) error {
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
		return errReported
	case ws.Signaled():
		return fmt.Errorf("failed to setup network: %s killed by signal %v", layout.NetSetupIn, ws.Signal())
	default:
		return fmt.Errorf("failed to setup network: %s exited %d", layout.NetSetupIn, ws.ExitStatus())
	}
}

// setupNetworks sets up the pod's CNI networks in PID 1's network
// namespace, before PID 1 gets its configuration, so before any app
// starts.
func setupNetworks(podDir string, f *runFlags, pid int) error {
	args := []string{"add", "--pid=" + strconv.Itoa(pid), "--net=" + f.net, "--local-config=" + f.localConfig}
	if f.opts.ResolvMode == "default" {
		args = append(args, "--dns")
	}
	if f.opts.Debug {
		args = append(args, "--debug")
	}
	return runNetSetup(podDir, append(args, f.opts.UUID))
}

// gcNetworks tears down the pod's networks if it has network state; a pod
// that never asked for networks has none, and gc does not exec net-setup.
func gcNetworks(podDir, localConfig, uuid string, debug bool) error {
	found := false
	for _, name := range []string{layout.NetInfo, layout.Netns, layout.NetDir} {
		if _, err := os.Lstat(filepath.Join(podDir, name)); err == nil {
			found = true
		}
	}
	if !found {
		return nil
	}
	args := []string{"del", "--local-config=" + localConfig}
	if debug {
		args = append(args, "--debug")
	}
	if err := runNetSetup(podDir, append(args, uuid)); err != nil {
		if errors.Is(err, errReported) {
			return errors.New("network teardown failed")
		}
		return err
	}
	return nil
}

// setMetadataURL gives every app AC_METADATA_URL on the host's address on
// the pod's forwarding network (its gateway), as rkt's stage1 does for a
// pod with networks of its own: stage0 registered the pod with the
// metadata service under the token. The saved specs (enter's) get it too:
// recordPod writes them after this.
func setMetadataURL(podDir string, pod *podspec.Pod, token string) error {
	d, err := os.Open(podDir)
	if err != nil {
		return err
	}
	defer d.Close()
	nis, err := netinfo.LoadAt(int(d.Fd()))
	if err != nil {
		return fmt.Errorf("--mds-token: %w", err)
	}
	ip := netinfo.MetadataHost(nis)
	if ip == nil {
		return errors.New("--mds-token: failed to get default Host IP: the pod's forwarding network gave no gateway")
	}
	u := podspec.MetadataURLAt(ip.String(), token)
	for i := range pod.Apps {
		pod.Apps[i].Spec.Env = append(pod.Apps[i].Spec.Env, "AC_METADATA_URL="+u)
	}
	return nil
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
