package pid1

import (
	"slices"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/supervisor"
)

// phaseSpec is the spec of the process the app's run is at: the app's own,
// or that of one of its eventHandlers. A handler runs as rkt's stage1 runs
// it (PermissionsStartOnly=: in the app's root, with its environment,
// working directory and mounts, as root, uid and gid 0, without the app's
// supplementary groups). Unlike there it keeps the app's isolators
// (capabilities, seccomp, no_new_privs, its cgroup's limits and device
// list): the handler is the image's code, as hostile as the app, and an
// image may make its app root anyway.
func phaseSpec(a *supervisor.App) *appexec.Spec {
	var exec []string
	switch a.Phase() {
	case supervisor.PhasePreStart:
		exec = a.Cfg.PreStart
	case supervisor.PhasePostStop:
		exec = a.Cfg.PostStop
	default:
		return &a.Cfg.Spec
	}
	s := a.Cfg.Spec
	s.Exec = slices.Clone(exec)
	s.UID, s.GID, s.Groups = 0, 0, nil
	return &s
}
