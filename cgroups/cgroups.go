// Package cgroups owns the pod's control groups: one for the stage1's PID 1
// and one per app, so that everything an app started (the daemons it
// forked included) can be found and killed, and limits applied, without
// ever touching the stage1 itself. It uses the cgroup v2 hierarchy where
// one is mounted (alone, or as the "unified" tree of a hybrid layout) to
// track and kill, and the v1 controllers of a hybrid or legacy layout for
// limits.
package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// v1Controllers are the v1 hierarchies a group is created in: pids for
// pids.max, memory and cpu for the resource isolators, devices for the
// apps' device allow-list. The first one found
// also tracks processes when there is no v2 hierarchy. (freezer was on the
// list but nothing used it: three more cgroups to make and remove per pod.)
var v1Controllers = []string{"pids", "memory", "cpu", "devices"}

// Group is one cgroup, present in every hierarchy this package uses. It is
// plain data so it can cross from the run entry point to PID 1 as JSON and
// be saved in the pod directory for gc.
type Group struct {
	// V2 is the absolute directory in the cgroup v2 hierarchy, "" if
	// there is none.
	V2 string `json:"v2,omitempty"`
	// V1 maps a v1 controller to the group's absolute directory in it.
	V1 map[string]string `json:"v1,omitempty"`
	// Unified is set when V2 is the only hierarchy (controllers live in
	// it).
	Unified bool `json:"unified,omitempty"`
}

// mounts lists cgroup and cgroup2 mounts from this process's mountinfo:
// the first cgroup2 mount, and for each v1 controller we use the first
// hierarchy it is bound to.
func mounts() (v2 string, v1 map[string]string, err error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return "", nil, err
	}
	v1 = map[string]string{}
	for _, in := range infos {
		if in.FSType == "cgroup2" {
			if v2 == "" {
				v2 = in.Mountpoint
			}
			continue
		}
		for _, opt := range strings.Split(in.VFSOptions, ",") {
			if slices.Contains(v1Controllers, opt) {
				if _, seen := v1[opt]; !seen {
					v1[opt] = in.Mountpoint
				}
			}
		}
	}
	return v2, v1, nil
}

// selfPaths reads the calling process's cgroup in each hierarchy.
func selfPaths() (v2 string, v1 map[string]string, err error) {
	ms, err := Of(0)
	if err != nil {
		return "", nil, err
	}
	v1 = map[string]string{}
	for _, m := range ms {
		if m.Unified {
			v2 = m.Path
			continue
		}
		for _, c := range strings.Split(m.Hierarchy, ",") {
			v1[c] = m.Path
		}
	}
	return v2, v1, nil
}

// Current returns the calling process's own group, in the hierarchies this
// package uses.
func Current() (*Group, error) {
	v2m, v1m, err := mounts()
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	v2p, v1p, err := selfPaths()
	if err != nil {
		return nil, fmt.Errorf("own cgroup: %w", err)
	}
	g := &Group{V1: map[string]string{}}
	if v2m != "" {
		g.V2 = filepath.Join(v2m, v2p)
		g.Unified = len(v1m) == 0
	}
	for c, m := range v1m {
		if p, ok := v1p[c]; ok {
			g.V1[c] = filepath.Join(m, p)
		}
	}
	if g.V2 == "" && len(g.V1) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return g, nil
}

// dirs lists the group's directories: v2 first, then the v1 ones in
// v1Controllers' order, then any other v1 hierarchy the group names (a
// group saved by an older stage1 that used more, which gc must still
// remove).
func (g *Group) dirs() []string {
	var ds []string
	if g.V2 != "" {
		ds = append(ds, g.V2)
	}
	for _, c := range v1Controllers {
		if d, ok := g.V1[c]; ok {
			ds = append(ds, d)
		}
	}
	var other []string
	for c := range g.V1 {
		if !slices.Contains(v1Controllers, c) {
			other = append(other, c)
		}
	}
	slices.Sort(other)
	for _, c := range other {
		ds = append(ds, g.V1[c])
	}
	return ds
}

// Dirs lists the group's directories, one per hierarchy (dirs' order).
func (g *Group) Dirs() []string { return g.dirs() }

// Sub is the group name below g, which may not exist.
func (g *Group) Sub(name string) *Group {
	c := &Group{V1: map[string]string{}, Unified: g.Unified}
	if g.V2 != "" {
		c.V2 = filepath.Join(g.V2, name)
	}
	for k, d := range g.V1 {
		c.V1[k] = filepath.Join(d, name)
	}
	return c
}

// Child creates (if needed) the group name below g in every hierarchy.
func (g *Group) Child(name string) (*Group, error) {
	c := g.Sub(name)
	for _, d := range c.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
	}
	return c, nil
}

// Add moves pid into the group in every hierarchy.
func (g *Group) Add(pid int) error {
	return g.add(pid, g.dirs())
}

func (g *Group) add(pid int, dirs []string) error {
	b := []byte(strconv.Itoa(pid))
	for _, d := range dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), b); err != nil {
			return fmt.Errorf("move %d into %s: %w", pid, d, err)
		}
	}
	return nil
}
