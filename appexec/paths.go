package appexec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultMaskedPaths are the kernel interfaces an app does not see unless
// the pod runs with --disable-paths: rkt's InaccessiblePaths
// (rkt:stage1/init/common/app.go: kernel memory and symbols, firmware,
// modules, power) and what runc and Docker mask besides (timer and
// latency statistics that leak other tenants' activity, the key ring
// list, the RAPL energy counters of the Platypus attack, CVE-2020-8694).
var DefaultMaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/config.gz", "/proc/kallsyms",
	"/proc/kcore", "/proc/keys", "/proc/kmem", "/proc/latency_stats",
	"/proc/mem", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
	"/proc/timer_stats",
	"/sys/devices/virtual/powercap", "/sys/firmware", "/sys/fs",
	"/sys/hypervisor", "/sys/module", "/sys/power",
}

// DefaultReadOnlyPaths are the writable kernel tunables under /proc an app
// may read but not write (/sys is mounted read-only as a whole): sysctls,
// /proc/sysrq-trigger (one write reboots the host), IRQ affinities.
var DefaultReadOnlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// maskName is the empty, mode-0 file bound over every masked file; it is
// made in the app's fresh /dev and unlinked once bound.
const maskName = ".pod1-masked"

// protectPaths makes the read-only paths read-only and masks the masked
// ones; it runs after every mount of the app, before pivot_root. With
// hasViews, /sys/fs is left to cgroupViewsOn, which masks it but for the
// app's cgroups.
func protectPaths(root *os.File, s *Spec, hasViews bool) error {
	for _, p := range append(append([]string{}, s.ReadOnlyPaths...), s.MaskedPaths...) {
		if c := path.Clean(p); c != p || !strings.HasPrefix(p, "/proc/") && !strings.HasPrefix(p, "/sys/") {
			return fmt.Errorf("protected path %q is not a clean path under /proc or /sys", p)
		}
	}
	for _, p := range s.ReadOnlyPaths {
		if err := readOnlyBind(root, p); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	if len(s.MaskedPaths) == 0 {
		return nil
	}
	dev, src, err := maskSource(root, s)
	if err != nil {
		return fmt.Errorf("mask paths: %w", err)
	}
	defer dev.Close()
	defer src.Close()
	defer func() { _ = unix.Unlinkat(int(dev.Fd()), maskName, 0) }()
	for _, p := range s.MaskedPaths {
		if p == sysFsDir && hasViews {
			continue // cgroupViewsOn masks it, all but cgroup/
		}
		if err := mask(root, p, src); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// maskSource creates the file bound over masked files in the app's /dev,
// a tmpfs the stage1 has just made, and returns the /dev directory and
// the file.
func maskSource(root *os.File, s *Spec) (dev, src *os.File, err error) {
	target := ""
	for _, m := range s.Mounts {
		if m.Kind == KindDev {
			target = m.Target
		}
	}
	if target == "" {
		return nil, nil, errors.New("masking needs the pod's /dev")
	}
	if dev, err = openInRoot(root, target); err != nil {
		return nil, nil, err
	}
	fd, err := unix.Openat(int(dev.Fd()), maskName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		fd, err = unix.Openat(int(dev.Fd()), maskName, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		dev.Close()
		return nil, nil, fmt.Errorf("create %s: %w", maskName, err)
	}
	return dev, os.NewFile(uintptr(fd), maskName), nil
}

// mask covers p: a directory with an empty read-only tmpfs of mode 000, a
// file with the empty mode-0 file, bound read-only. What the kernel does
// not offer (no ACPI, no /proc/kcore) is skipped.
func mask(root *os.File, p string, src *os.File) error {
	t, err := openInRoot(root, p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer t.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(t.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.Mount("tmpfs", fdPath(t), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=000,size=4k,nr_inodes=1")
	}
	return bindReadOnly(src, t, 0)
}

// readOnlyBind binds p onto itself, read-only.
func readOnlyBind(root *os.File, p string) error {
	t, err := openInRoot(root, p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer t.Close()
	return bindReadOnly(t, t, unix.AT_RECURSIVE)
}

// bindReadOnly mounts a copy of src's tree (recursive: unix.AT_RECURSIVE)
// on dst, its top mount read-only, nosuid and nodev and its other flags
// as src's. The copy is made read-only while it is detached, so the one
// lookup of dst is the only one: no path is walked again to reach the
// new mount, and no window shows it writable.
func bindReadOnly(src, dst *os.File, recursive uint) error {
	tree, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|recursive)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	// Without AT_RECURSIVE: the top mount only, as a bind remount
	// without MS_REC did.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", int(dst.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// remountFdReadOnly remounts the mount f is the root of read-only, with
// extra flags: a bind remount replaces the per-mount flags, so the ones it
// has are carried over.
func remountFdReadOnly(f *os.File, extra uintptr) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	flags := unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | extra
	for _, m := range [][2]uintptr{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&m[0] != 0 {
			flags |= m[1]
		}
	}
	return unix.Mount("", fdPath(f), "", flags, "")
}
