package podstart

import (
	"fmt"
	"slices"
	"strings"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podspec"
)

// checkIsolation refuses, before anything starts, a pod whose resource
// isolators this host cannot enforce: an app must not run without the
// limit it asked for (rkt only warned).
func checkIsolation(pod *podspec.Pod) error {
	self, cgErr := cgroups.Current()
	for _, a := range pod.Apps {
		for _, ctrl := range a.Resources.Controllers() {
			iso := map[string]string{"memory": types.ResourceMemoryName, "cpu": types.ResourceCPUName + " or " + types.LinuxCPUSharesName}[ctrl]
			if cgErr != nil {
				return fmt.Errorf("app %q: isolator %s: %w", a.Spec.Name, iso, cgErr)
			}
			if !self.Available(ctrl) {
				return fmt.Errorf("app %q: isolator %s: the host has no usable %s cgroup controller", a.Spec.Name, iso, ctrl)
			}
		}
	}
	return nil
}

// warnIsolation says, once per app, when the app is given a way out of
// the pod: the isolation rkt's insecure options and retain-sets can turn
// off is the user's to turn off, but not silently (threats T4).
func warnIsolation(pod *podspec.Pod, f *runFlags) {
	for _, opt := range []struct {
		on   bool
		name string
	}{
		{f.opts.DisableCapabilities, "--disable-capabilities-restriction: root apps get every capability"},
		{f.opts.DisableSeccomp, "--disable-seccomp: apps get no system call filter"},
		{f.opts.DisablePaths, "--disable-paths: /proc and /sys are neither masked nor read-only"},
	} {
		if opt.on {
			logx.Warnf("%s", opt.name)
		}
	}
	for _, a := range pod.Apps {
		iso := a.Spec.Isolation
		// A non-root app gets no capability at execve, and with
		// no_new_privs no setuid binary can give it one. In a user
		// namespace the capabilities are that namespace's only: none
		// of them reaches PID 1 or the host.
		if iso.UnrestrictedCapabilities || a.Spec.UID != 0 && iso.NoNewPrivileges || a.Spec.UserNS != nil {
			continue
		}
		var risky []string
		for _, c := range appexec.EscapeCapabilities {
			if slices.Contains(iso.Capabilities, c) {
				risky = append(risky, c)
			}
		}
		if len(risky) > 0 {
			logx.Warnf("app %q has %s: with these a root process can reach the host", a.Spec.Name, strings.Join(risky, ", "))
		}
	}
}
