// Package podmounts unmounts, with their copies, the apps' overlays stage0
// (rkt's, or pod1 run) mounted for a pod in the host's mount namespace,
// where the data directory is reachable through a second path.
//
// On a host whose mounts are shared (systemd's), a data directory that is
// a bind mount of another directory (an fstab bind, or one directory
// bound twice) is in one peer group with it: each overlay mounted under
// the pod's directory is mounted under the other path too. An unmount
// travels to the copies mounted on the peers of the unmounted mount's
// parent, and only to those that have nothing mounted on them. rkt's gc
// makes every mount under the pod private, then unmounts the stage1's
// root first, lazily since the apps' roots are on it: the apps' roots,
// on a stage1 root that is private by then, are unmounted without their
// copies, and the copy of the stage1's root, with the apps' copies on
// it, stays too. The pod's directories stay mount points, and rkt cannot
// remove the pod (EBUSY), whatever its stage1.
//
// The stage1's gc entry point, which rkt's gc runs first, unmounts the
// apps' overlays that have such a copy, deepest first, while the
// stage1's root is still shared: their copies go with them, and rkt's
// own unmount of the stage1's root, which then has nothing on it, takes
// its copy away. pod1 gc unmounts deepest first, so needs none of this.
package podmounts

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// Mount is what this package reads of one line of a mount table.
type Mount struct {
	Point  string
	FSType string
	// Group is the mount's peer group ("shared:N"), 0 if it is not
	// shared.
	Group int
}

// FromInfos converts a mount table read with package mountinfo.
func FromInfos(infos []*mountinfo.Info) []Mount {
	out := make([]Mount, 0, len(infos))
	for _, in := range infos {
		m := Mount{Point: in.Mountpoint, FSType: in.FSType}
		for _, opt := range strings.Fields(in.Optional) {
			if g, ok := strings.CutPrefix(opt, "shared:"); ok {
				m.Group, _ = strconv.Atoi(g)
			}
		}
		out = append(out, m)
	}
	return out
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// appOverlay reports whether m is an overlay where stage0 mounts an app's
// root for the pod in dir.
func appOverlay(dir string, m Mount) bool {
	if m.FSType != "overlay" {
		return false
	}
	rest, ok := strings.CutPrefix(m.Point, filepath.Join(dir, layout.Stage2Dir)+"/")
	if !ok {
		return false
	}
	app, root, ok := strings.Cut(rest, "/")
	return ok && app != "" && root == layout.RootfsName
}

// Copied reports whether m is the overlay of an app's root stage0 mounted
// for the pod in dir that all, the namespace's mount table, also has
// outside dir: a member of its peer group mounted elsewhere.
func Copied(dir string, m Mount, all []Mount) bool {
	if m.Group == 0 || !appOverlay(dir, m) {
		return false
	}
	for _, o := range all {
		if o.Group == m.Group && !within(o.Point, dir) {
			return true
		}
	}
	return false
}

// UnmountCopied unmounts, deepest first, the apps' overlays of the pod in
// dir that have a copy elsewhere in this mount namespace (Copied), with
// their copies. Everything else is left to the caller's gc.
func UnmountCopied(dir string) error {
	dir = filepath.Clean(dir)
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	all := FromInfos(infos)
	var ms []Mount
	for _, m := range all {
		if Copied(dir, m, all) {
			ms = append(ms, m)
		}
	}
	sort.SliceStable(ms, func(i, j int) bool {
		return strings.Count(ms[i].Point, "/") > strings.Count(ms[j].Point, "/")
	})
	var errs []error
	for _, m := range ms {
		err := unix.Unmount(m.Point, unix.UMOUNT_NOFOLLOW)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			continue // EINVAL: not a mount point any more
		}
		// Busy: detached, its copies with it; nothing of the pod
		// runs any more.
		if derr := unix.Unmount(m.Point, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); derr != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Point, err))
		}
	}
	return errors.Join(errs...)
}
