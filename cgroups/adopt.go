package cgroups

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// UnifiedOf is pid's cgroup in the unified hierarchy, as an absolute
// directory.
func UnifiedOf(pid int) (string, error) {
	mount, _, err := unifiedMount()
	if err != nil {
		return "", err
	}
	ms, err := Of(pid)
	if err != nil {
		return "", fmt.Errorf("cgroup of %d: %w", pid, err)
	}
	for _, m := range ms {
		if m.Unified && m.Deleted {
			return "", fmt.Errorf("cgroup of %d: %s is removed", pid, m.Path)
		}
		if m.Unified {
			return filepath.Join(mount, filepath.Clean("/"+m.Path)), nil
		}
	}
	return "", fmt.Errorf("cgroup of %d: not in a unified hierarchy", pid)
}

// InCallersCgroup reports whether NewPod made g inside the cgroup of
// ancestor's caller (a systemd unit that runs rkt run): ancestor then is
// in that cgroup's OwnLeaf, beside g.
func InCallersCgroup(g *Group, ancestor int) bool {
	if !g.Unified || g.V2 == "" {
		return false
	}
	own, err := UnifiedOf(ancestor)
	return err == nil && own == filepath.Join(filepath.Dir(g.V2), OwnLeaf)
}

// AdoptPod makes dir, a cgroup of the unified hierarchy that another
// manager made for the pod (systemd's scope for a machine, delegated to
// us) with the pod's PID 1 in it, the pod's cgroup: PID 1 moves into
// dir/leaf, so that dir holds no process and may pass controllers on, and
// the controllers are enabled as NewPod enables them; need are those the
// pod cannot run without.
func AdoptPod(dir string, need []string, pid int, leaf string) (*Group, error) {
	mount, _, err := unifiedMount()
	if err != nil {
		return nil, err
	}
	g := &Group{V2: filepath.Clean(dir), V1: map[string]string{}, Unified: true}
	if rel, err := filepath.Rel(mount, g.V2); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("cgroup %s is not below %s", dir, mount)
	}
	// PID 1 may have forked (its spare) between systemd's move and
	// ours: its children go with it. Anything else in dir is not the
	// pod's, and dir is then no cgroup for it.
	if !moveToLeaf(g.V2, leaf, pid) {
		return nil, errors.New("cgroup " + g.V2 + " holds processes that are not the pod's")
	}
	ctrls := unifiedControllers
	for _, c := range need {
		if !containsField(strings.Join(ctrls, " "), c) {
			ctrls = append(ctrls[:len(ctrls):len(ctrls)], c)
		}
	}
	why := enableDown(mount, filepath.Dir(g.V2), ctrls)
	for _, c := range need {
		if why[c] != nil {
			return nil, fmt.Errorf("cgroup controller %s: %w", c, why[c])
		}
	}
	for _, c := range ctrls {
		if why[c] != nil {
			continue
		}
		if err := enable(g.V2, c); err != nil && containsField(strings.Join(need, " "), c) {
			return nil, fmt.Errorf("cgroup controller %s: %w", c, err)
		}
	}
	return g, nil
}
