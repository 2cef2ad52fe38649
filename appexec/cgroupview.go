package appexec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
)

// An app sees its own cgroups, and nothing else of any hierarchy, at
// /sys/fs/cgroup, read-only: runtimes (the JVM, Go's GOMAXPROCS) and
// tools size themselves from the limits there. Its limits are set in
// that very directory, and a root app could raise them if it could write
// there, so none of it is writable, its own cgroup included; and no
// other cgroup, of the pod or of the host, is shown at all (rkt's stage1
// showed its apps the host's hierarchies, hid them behind its masked
// /sys/fs by default, and left the pod's own subtree writable).

// cgroupView is one of the calling process's own cgroup directories and
// the name it gets under /sys/fs/cgroup ("" for the whole of it: the one
// hierarchy of a unified host).
type cgroupView struct {
	name, source string
	// links are the single controllers of a co-mounted v1 hierarchy
	// ("cpu,cpuacct"), linked to it as the host links them.
	links []string
}

// ownCgroupViews finds the calling process's cgroups (it is in the app's
// own before it reads its spec) among the cgroup mounts of its mount
// namespace, PID 1's, which shows the pod's cgroups and no other part of
// any hierarchy: only the hierarchies the pod uses are found. An app
// without the stage1's /sys gets none.
func ownCgroupViews(s *Spec) ([]cgroupView, error) {
	// Only into the sysfs the stage1 mounts on /sys: nowhere else.
	if !slices.ContainsFunc(s.Mounts, func(m Mount) bool { return m.Kind == KindSys && m.Target == "/sys" }) {
		return nil, nil
	}
	own, err := cgroups.Of(0)
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	var views []cgroupView
	var v2 *cgroupView
	for _, m := range own {
		if strings.HasPrefix(m.Hierarchy, "name=") {
			continue
		}
		ctrls := m.Controllers()
		src := sourceIn(mounts, m.Unified, ctrls, m.Path)
		if src == "" {
			continue
		}
		if m.Unified {
			v2 = &cgroupView{source: src}
			continue
		}
		v := cgroupView{name: m.Hierarchy, source: src}
		if len(ctrls) > 1 {
			v.links = ctrls
		}
		views = append(views, v)
	}
	if v2 != nil {
		if len(views) > 0 {
			v2.name = "unified"
		}
		views = append(views, *v2)
	}
	return views, nil
}

// sourceIn returns the directory of cgroup p in the mount of its
// hierarchy whose root holds it most closely, "" if none does.
func sourceIn(mounts []*mountinfo.Info, unified bool, ctrls []string, p string) string {
	best, bestRoot := "", ""
	for _, m := range mounts {
		if unified != (m.FSType == "cgroup2") {
			continue
		}
		if !unified {
			opts := strings.Split(m.VFSOptions, ",")
			if slices.ContainsFunc(ctrls, func(c string) bool { return !slices.Contains(opts, c) }) {
				continue
			}
		}
		rel, ok := strings.CutPrefix(p, m.Root)
		if m.Root == "/" {
			rel, ok = p, true
		}
		if !ok || rel != "" && !strings.HasPrefix(rel, "/") || best != "" && len(m.Root) <= len(bestRoot) {
			continue
		}
		best, bestRoot = path.Join(m.Mountpoint, rel), m.Root
	}
	return best
}

// mountCgroupViews puts the views on the directory name of parent (the
// app's /sys/fs/cgroup): the one hierarchy of a unified host there
// itself; otherwise a tmpfs with a directory per hierarchy, made
// read-only once filled.
func mountCgroupViews(parent *os.File, name string, views []cgroupView) error {
	dir, err := openDirAt(parent, name)
	if err != nil {
		return err
	}
	defer dir.Close()
	if len(views) == 1 && views[0].name == "" {
		return attachReadOnly(views[0].source, dir)
	}
	if err := unix.Mount("tmpfs", fdPath(dir), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	tmp, err := openDirAt(parent, name) // now the tmpfs
	if err != nil {
		return err
	}
	defer tmp.Close()
	for _, v := range views {
		if err := unix.Mkdirat(int(tmp.Fd()), v.name, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", v.name, err)
		}
		t, err := openDirAt(tmp, v.name)
		if err != nil {
			return err
		}
		err = attachReadOnly(v.source, t)
		t.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		for _, l := range v.links {
			if err := unix.Symlinkat(v.name, int(tmp.Fd()), l); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("symlink %s: %w", l, err)
			}
		}
	}
	return remountFdReadOnly(tmp, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
}

// attachReadOnly mounts a read-only copy of source (not the mounts below
// it) on target: read-only before it is ever attached.
func attachReadOnly(source string, target *os.File) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("clone %s: %w", source, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("make %s read-only: %w", source, err)
	}
	return unix.MoveMount(fd, "", int(target.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// openDirAt opens the directory name of parent, never through a symlink.
func openDirAt(parent *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(parent.Fd()), name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// sysFsDir is where the kernel puts the cgroup mount point in a sysfs.
const sysFsDir = "/sys/fs"

// cgroupViewsOn gives the app its views, in its root, once every other
// mount is made: on /sys/fs/cgroup of its sysfs, or, when /sys/fs is
// masked (the default, as in rkt), in a read-only tmpfs on /sys/fs that
// holds nothing but cgroup/. Nothing is mounted when there are no views.
func cgroupViewsOn(root *os.File, s *Spec, views []cgroupView) error {
	if len(views) == 0 {
		return nil
	}
	fs, err := openInRoot(root, sysFsDir)
	if err != nil {
		return fmt.Errorf("open %s: %w", sysFsDir, err)
	}
	defer fs.Close()
	if !slices.Contains(s.MaskedPaths, sysFsDir) {
		return mountCgroupViews(fs, "cgroup", views)
	}
	if err := unix.Mount("tmpfs", fdPath(fs), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=4k"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", sysFsDir, err)
	}
	tmp, err := openInRoot(root, sysFsDir) // now the tmpfs
	if err != nil {
		return err
	}
	defer tmp.Close()
	if err := unix.Mkdirat(int(tmp.Fd()), "cgroup", 0o755); err != nil {
		return fmt.Errorf("mkdir %s/cgroup: %w", sysFsDir, err)
	}
	if err := mountCgroupViews(tmp, "cgroup", views); err != nil {
		return err
	}
	return remountFdReadOnly(tmp, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
}
