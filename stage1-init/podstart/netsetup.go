package podstart

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/pod1/pod1/network/netinfo"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/stage1-init/netexec"
)

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
	return netexec.Run(podDir, append(args, f.opts.UUID))
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
