package cgroups

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// PodName is the name of a pod's cgroup, in every hierarchy: the one rkt's
// stage1 gives it, the scope systemd-machined makes for the machine
// rkt-<uuid>, which rkt's API service and the tools that find rkt's pods by
// cgroup look for. It is a systemd unit name, in which a '-' stands for a
// '/', so the machine's own '-'s are escaped as systemd escapes them: the
// directory's name holds backslashes.
func PodName(uuid string) string {
	return "machine-" + unitEscape("rkt-"+uuid) + ".scope"
}

// LegacyPodName is the name pod1's stage1 gave a pod's cgroup before
// PodName: pods of such a stage1 may still be running, or waiting for gc,
// when the host updates to this one, and gc must still remove their
// cgroups.
func LegacyPodName(uuid string) string { return "pod1-" + uuid }

// PodUUID is the UUID a pod cgroup's name (PodName or LegacyPodName) is
// for, or "" if name is neither.
func PodUUID(name string) string {
	u, ok := strings.CutPrefix(name, "pod1-")
	if !ok {
		esc, ok := strings.CutPrefix(name, `machine-rkt\x2d`)
		if !ok {
			return ""
		}
		esc, ok = strings.CutSuffix(esc, ".scope")
		if !ok {
			return ""
		}
		u = strings.ReplaceAll(esc, `\x2d`, "-")
	}
	if !layout.IsUUID(u) || (name != PodName(u) && name != LegacyPodName(u)) {
		return ""
	}
	return u
}

// unitEscape escapes s for a systemd unit name as systemd does for a
// string that is not a path: '/' becomes '-', and every other byte but
// ASCII letters, digits, ':', '_' and a '.' not in first place \xNN.
func unitEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == ':', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		case c == '/':
			b.WriteByte('-')
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}

// CheckPod refuses a group read from a pod directory (the gc entry point
// runs as host root on whatever the pod's cgroups.json says, and a pod may
// have planted it) unless every directory it names is the cgroup of the
// pod uuid: an absolute, clean path, named PodName(uuid) (or
// LegacyPodName(uuid), a pod of an older stage1), strictly below
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
		if b := filepath.Base(dir); b != PodName(uuid) && b != LegacyPodName(uuid) {
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
