package podplan

import (
	"slices"

	"github.com/pod1/pod1/appexec"
)

// PID1Capabilities are what PID 1 and the processes it forks to set apps
// up use themselves: mounts, pivot_root, namespaces and seccomp without
// no_new_privs (SYS_ADMIN), /dev nodes (MKNOD), credentials, bounding set
// and user-namespace maps (SETUID, SETGID, SETPCAP, SETFCAP), files and
// cgroups owned by others, shifted trees with --private-users (CHOWN,
// DAC_OVERRIDE, FOWNER), signals to apps of any user (KILL), a lowered
// OOM score (SYS_RESOURCE), device filters on cgroup v2 (BPF). Everything
// else (SYS_PTRACE, DAC_READ_SEARCH, SYS_MODULE, SYS_RAWIO, NET_ADMIN...)
// is dropped unless an app of the pod is granted it, since an app's
// bounding set can only be a part of PID 1's.
var PID1Capabilities = []string{
	"CAP_SYS_ADMIN", "CAP_MKNOD", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP",
	"CAP_SETFCAP", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL",
	"CAP_SYS_RESOURCE", "CAP_BPF",
}

// BoundingSet is PID 1's bounding set for the pod: its own needs and
// every capability an app of the pod may be given (AppsBoundingSet). nil
// means all of them: an app with --disable-capabilities-restriction keeps
// the stage1's whole set.
func (pod *Pod) BoundingSet() []string {
	apps := pod.AppsBoundingSet()
	if apps == nil {
		return nil
	}
	return appexec.SortCapabilities(append(slices.Clone(PID1Capabilities), apps...))
}

// AppsBoundingSet is every capability an app of the pod may be given: the
// union of their bounding sets, which the init of the apps' pid namespace
// shows as its own, as rkt's stage1 showed its pid 1's (rkt's TestCaps
// reads it); a mutable pod's apps added later may ask for rkt's defaults.
// nil means all of them (--disable-capabilities-restriction).
func (pod *Pod) AppsBoundingSet() []string {
	set := []string{}
	if pod.Mutable {
		set = append(set, appexec.DefaultCapabilities...)
	}
	for _, a := range pod.Apps {
		if a.Spec.Isolation.UnrestrictedCapabilities {
			return nil
		}
		set = append(set, a.Spec.Isolation.Capabilities...)
	}
	return appexec.SortCapabilities(set)
}
