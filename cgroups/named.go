package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
)

// Named lists the directories of every cgroup called name, in every
// mounted hierarchy (v2, and each v1 one: all of them, not only those this
// package creates groups in), at any depth: the lookup of a pod's groups
// (PodName) by the tools that check what a pod left, wherever the run
// entry point put them (below the caller's own group, which on a systemd
// host is a session scope some levels down).
func Named(name string) ([]string, error) {
	return Find(func(n string) bool { return n == name })
}

// Find lists the directories of every cgroup whose name match accepts, in
// every mounted hierarchy, at any depth, hierarchy by hierarchy. It does
// not look below a group it lists (a pod's groups are its own). Groups
// removed while it walks are skipped; another error ends the walk of its
// hierarchy and is returned with what was found.
func Find(match func(name string) bool) ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	var out []string
	var errs []error
	for _, root := range hierarchyRoots(infos) {
		found, err := findUnder(root, match)
		out = append(out, found...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// hierarchyRoots picks one mount point per mounted hierarchy, in mount
// order. A hierarchy is a superblock (its device number); of its mounts
// the one of the hierarchy's widest view wins (the shortest root: "/"
// unless only a subtree is mounted), so that a hierarchy also bound
// elsewhere (into a pod's tree, or a second time) is walked once, whole.
func hierarchyRoots(infos []*mountinfo.Info) []string {
	type dev struct{ major, minor int }
	best := map[dev]*mountinfo.Info{}
	var order []dev
	for _, in := range infos {
		d := dev{in.Major, in.Minor}
		cur, seen := best[d]
		if !seen {
			order = append(order, d)
		}
		if !seen || len(in.Root) < len(cur.Root) {
			best[d] = in
		}
	}
	roots := make([]string, 0, len(order))
	for _, d := range order {
		roots = append(roots, best[d].Mountpoint)
	}
	return roots
}

// findUnder walks the cgroup directories below dir.
func findUnder(dir string, match func(string) bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if match(e.Name()) {
			out = append(out, p)
			continue
		}
		found, err := findUnder(p, match)
		out = append(out, found...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
