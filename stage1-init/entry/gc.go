package entry

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/stage1-init/netexec"
)

// gcCgroups removes the pod's cgroups (cwd is the pod directory), which
// the run entry point leaves emptied: see cgroups.RemovePod.
func gcCgroups(uuid string) error { return cgroups.RemovePod(".", uuid) }

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
	if err := netexec.Run(podDir, append(args, uuid)); err != nil {
		if errors.Is(err, netexec.ErrReported) {
			return errors.New("network teardown failed")
		}
		return err
	}
	return nil
}
