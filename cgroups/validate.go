package cgroups

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// PodName is the name of a pod's cgroup, in every hierarchy.
func PodName(uuid string) string { return "pod1-" + uuid }

// CheckPod refuses a group read from a pod directory (the gc entry point
// runs as host root on whatever the pod's cgroups.json says, and a pod may
// have planted it) unless every directory it names is the cgroup of the
// pod uuid: an absolute, clean path, named PodName(uuid), strictly below
// the mount point of a hierarchy of the right kind (cgroup2 for the v2
// directory, a v1 hierarchy of that controller for each v1 one) with no
// other file system mounted in between, and, if it exists, a directory of
// that file system reached without a symlink.
func CheckPod(g *Group, uuid string) error {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return fmt.Errorf("mounts: %w", err)
	}
	check := func(dir, ctrl string) error {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			return fmt.Errorf("%q is not a clean absolute path", dir)
		}
		if filepath.Base(dir) != PodName(uuid) {
			return fmt.Errorf("%s is not this pod's cgroup (named %s)", dir, PodName(uuid))
		}
		// The innermost mount holding dir must be the hierarchy.
		var in *mountinfo.Info
		for _, m := range infos {
			if strings.HasPrefix(dir, strings.TrimSuffix(m.Mountpoint, "/")+"/") && (in == nil || len(m.Mountpoint) >= len(in.Mountpoint)) {
				in = m
			}
		}
		switch {
		case in == nil:
			return fmt.Errorf("%s is on no mount", dir)
		case ctrl == "" && in.FSType != "cgroup2":
			return fmt.Errorf("%s is not in a cgroup2 hierarchy (it is on %s, %s)", dir, in.Mountpoint, in.FSType)
		case ctrl != "" && (in.FSType != "cgroup" || !slices.Contains(strings.Split(in.VFSOptions, ","), ctrl)):
			return fmt.Errorf("%s is not in the %s cgroup hierarchy (it is on %s, %s)", dir, ctrl, in.Mountpoint, in.FSType)
		}
		var st unix.Stat_t
		if err := unix.Lstat(dir, &st); errors.Is(err, unix.ENOENT) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("%s is not a directory reached without symlinks", dir)
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if fs.Type != unix.CGROUP2_SUPER_MAGIC && fs.Type != unix.CGROUP_SUPER_MAGIC {
			return fmt.Errorf("%s is not on a cgroup file system", dir)
		}
		return nil
	}
	if g.V2 == "" && len(g.V1) == 0 {
		return errors.New("names no cgroup")
	}
	if g.V2 != "" {
		if err := check(g.V2, ""); err != nil {
			return err
		}
	}
	for c, d := range g.V1 {
		if c == "" || strings.ContainsAny(c, ",/") {
			return fmt.Errorf("%q is not a controller name", c)
		}
		if err := check(d, c); err != nil {
			return err
		}
	}
	return nil
}
