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

// Membership is one line of /proc/PID/cgroup: a hierarchy and the
// process's cgroup in it. Every reader of that file, in every role, goes
// through Of.
type Membership struct {
	// Hierarchy is the hierarchy as the file names it: "" for the
	// cgroup v2 one, else its v1 controllers ("cpu,cpuacct") or its
	// name ("name=systemd").
	Hierarchy string
	// Unified is set for the cgroup v2 hierarchy (id 0, no
	// controllers).
	Unified bool
	// Path is the process's cgroup, relative to the hierarchy's root as
	// the reader's cgroup namespace sees it.
	Path string
	// Deleted is set when the kernel marks the cgroup " (deleted)": a
	// process that has exited (a zombie) still names the cgroup it was
	// in once that is removed.
	Deleted bool
}

// Controllers are the v1 controllers of the hierarchy: none for the v2
// hierarchy or a named one.
func (m Membership) Controllers() []string {
	if m.Unified || m.Hierarchy == "" || strings.HasPrefix(m.Hierarchy, "name=") {
		return nil
	}
	return strings.Split(m.Hierarchy, ",")
}

// Of reads /proc/PID/cgroup; pid 0 reads the caller's own.
func Of(pid int) ([]Membership, error) {
	p := "/proc/self/cgroup"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/cgroup"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return ParseProc(string(b)), nil
}

// ParseProc reads the content of a /proc/PID/cgroup file; lines that are
// not "id:hierarchy:path" are skipped.
func ParseProc(s string) []Membership {
	var ms []Membership
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		m := Membership{Hierarchy: f[1], Unified: f[0] == "0" && f[1] == "", Path: f[2]}
		m.Path, m.Deleted = strings.CutSuffix(m.Path, " (deleted)")
		ms = append(ms, m)
	}
	return ms
}

// JoinOf moves the calling process into every cgroup pid is in, in every
// hierarchy, where it is not already: what it forks then is born there.
// It must run while the caller sees the host's cgroup mounts.
func JoinOf(pid int) error {
	target, err1 := Of(pid)
	self, err2 := Of(0)
	mounts, err3 := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	mine := map[string]string{}
	for _, m := range self {
		mine[m.Hierarchy] = m.Path
	}
	me := []byte(strconv.Itoa(os.Getpid()))
	for _, m := range target {
		if p, ok := mine[m.Hierarchy]; ok && p == m.Path {
			continue
		}
		mp := hierarchyMount(mounts, m.Hierarchy)
		if mp == "" {
			return fmt.Errorf("no mount for hierarchy %q", m.Hierarchy)
		}
		if err := os.WriteFile(filepath.Join(mp, m.Path, "cgroup.procs"), me, 0); err != nil {
			return fmt.Errorf("join cgroup %s in %s: %w", m.Path, mp, err)
		}
	}
	return nil
}

// hierarchyMount finds where the hierarchy (as /proc/PID/cgroup names
// it) is mounted with its whole tree: the cgroup2 mount for "", else the
// cgroup mount whose options hold all its controllers (or its name).
func hierarchyMount(mounts []*mountinfo.Info, hierarchy string) string {
	for _, in := range mounts {
		if in.Root != "/" {
			continue
		}
		if hierarchy == "" {
			if in.FSType == "cgroup2" {
				return in.Mountpoint
			}
			continue
		}
		if in.FSType != "cgroup" {
			continue
		}
		opts := strings.Split(in.VFSOptions, ",")
		if !slices.ContainsFunc(strings.Split(hierarchy, ","), func(c string) bool { return !slices.Contains(opts, c) }) {
			return in.Mountpoint
		}
	}
	return ""
}
