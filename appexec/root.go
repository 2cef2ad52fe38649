package appexec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// setupRoot makes the app's mounts inside its root and pivots into it. The
// calling process is alone in a fresh mount namespace.
func setupRoot(s *Spec) error {
	// Nothing we mount may propagate back to the pod or the host, and
	// pivot_root refuses shared mounts.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// pivot_root needs the new root to be a mount point.
	if err := unix.Mount(s.RootFS, s.RootFS, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind rootfs %s: %w", s.RootFS, err)
	}
	root, err := os.OpenFile(s.RootFS, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	// PID 1 sees the pod's trees read-only (it lives in a root of its
	// own, where nothing of the stage1 may be writable); the app's copy
	// of its own root is made writable again, that copy only.
	attr := unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(int(root.Fd()), "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("make rootfs writable: %w", err)
	}
	for _, m := range s.Mounts {
		if m.IfSource {
			if _, err := os.Lstat(m.Source); errors.Is(err, os.ErrNotExist) {
				continue
			}
		}
		if err := mountOne(root, &m, s); err != nil {
			if m.Optional && errors.Is(err, errSymlinkTarget) {
				continue
			}
			return fmt.Errorf("mount %s on %s: %w", m.Kind, m.Target, err)
		}
	}
	views, err := ownCgroupViews(s)
	if err != nil {
		return fmt.Errorf("find the app's cgroups: %w", err)
	}
	if err := protectPaths(root, s, len(views) > 0); err != nil {
		return err
	}
	if err := cgroupViewsOn(root, s, views); err != nil {
		return fmt.Errorf("cgroups on %s/cgroup: %w", sysFsDir, err)
	}
	if s.ReadOnlyRootFS {
		if err := remountFdReadOnly(root, 0); err != nil {
			return fmt.Errorf("readOnlyRootFS: %w", err)
		}
	}
	return pivot(s.RootFS)
}

var errSymlinkTarget = errors.New("target is a symlink in the image")

// fdPath names an open fd for mount(2): mounting onto the fd's magic link
// mounts on exactly the inode we resolved and checked, never on a path an
// attacker could swap in between (CVE-2021-30465, threats T5).
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

func mountOne(root *os.File, m *Mount, s *Spec) error {
	switch m.Kind {
	case KindProc:
		return mountAppsProc(root, m.Target)
	case KindSys:
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if m.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		return mountPseudo(root, m.Target, "sysfs", flags, "")
	case KindDev:
		if err := mountPseudo(root, m.Target, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_STRICTATIME, "mode=755,size=65536k"); err != nil {
			return err
		}
		return populateDev(root, m.Target, s.DevLog, s.ConsolePts)
	case KindPodShm:
		return mountPodShm(root, m.Target)
	case KindBind:
		return mountBind(root, m, s.StageBinds)
	}
	return fmt.Errorf("unknown mount kind %q", m.Kind)
}

// pseudoDir opens (creating if missing) a top-level directory of the root
// that must be a real directory: never a symlink (threats T6, T8).
func pseudoDir(root *os.File, name string) (*os.File, error) {
	name = path.Base(name)
	err := unix.Mkdirat(int(root.Fd()), name, 0o755)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, err
	}
	fd, err := unix.Openat(int(root.Fd()), name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("/%s must be a directory: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

func mountPseudo(root *os.File, target, fstype string, flags uintptr, data string) error {
	d, err := pseudoDir(root, target)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Mount(fstype, fdPath(d), fstype, flags, data)
}

type devNode struct {
	name         string
	major, minor uint32
}

var devNodes = []devNode{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7},
	{"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

var devLinks = [][2]string{
	{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	{"ptmx", "pts/ptmx"},
}

// populateDev fills the fresh /dev tmpfs; every node is made relative to
// the tmpfs we just mounted, so nothing in the image can redirect it.
// devLog, when set, is the socket bound as /dev/log; consolePts puts
// the console's devpts on /dev/pts (Spec.ConsolePts).
func populateDev(root *os.File, target, devLog string, consolePts bool) error {
	d, err := pseudoDir(root, target) // now the tmpfs root
	if err != nil {
		return err
	}
	defer d.Close()
	dfd := int(d.Fd())
	for _, n := range devNodes {
		if err := unix.Mknodat(dfd, n.name, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", n.name, err)
		}
	}
	for _, l := range devLinks {
		if err := unix.Symlinkat(l[1], dfd, l[0]); err != nil {
			return fmt.Errorf("symlink /dev/%s: %w", l[0], err)
		}
	}
	if devLog != "" {
		if err := bindDevLog(dfd, devLog); err != nil {
			return fmt.Errorf("/dev/log: %w", err)
		}
	}
	subs := []struct {
		name, fstype, data string
		mode               uint32
		flags              uintptr
	}{
		{"pts", "devpts", "newinstance,ptmxmode=0666,mode=0620,gid=5", 0o755, unix.MS_NOSUID | unix.MS_NOEXEC},
		{"mqueue", "mqueue", "", 0o755, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
	}
	// /dev/shm is the pod's (KindPodShm), or a volume's.
	if err := unix.Mkdirat(dfd, "shm", 0o1777); err != nil {
		return fmt.Errorf("mkdir /dev/shm: %w", err)
	}
	for _, s := range subs {
		if err := unix.Mkdirat(dfd, s.name, s.mode); err != nil {
			return fmt.Errorf("mkdir /dev/%s: %w", s.name, err)
		}
		if s.name == "pts" && consolePts {
			if err := mountConsolePts(dfd, s.name); err != nil {
				return fmt.Errorf("/dev/pts: %w", err)
			}
			continue
		}
		fd, err := unix.Openat(dfd, s.name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), s.name)
		err = unix.Mount(s.fstype, fdPath(f), s.fstype, s.flags, s.data)
		f.Close()
		if err != nil {
			return fmt.Errorf("mount /dev/%s: %w", s.name, err)
		}
	}
	return nil
}

// bindDevLog binds the socket src onto a new file "log" in the /dev
// directory dfd. The socket is the app's own (PID 1 made one per app, in
// a directory of its own out of every app's root): this bind is the
// app's only way to it.
func bindDevLog(dfd int, src string) error {
	sfd, err := unix.Open(src, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	s := os.NewFile(uintptr(sfd), src)
	defer s.Close()
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s is not a socket", src)
	}
	fd, err := unix.Openat(dfd, "log", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return err
	}
	unix.Close(fd)
	fd, err = unix.Openat(dfd, "log", unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	t := os.NewFile(uintptr(fd), "log")
	defer t.Close()
	return unix.Mount(fdPath(s), fdPath(t), "", unix.MS_BIND, "")
}

// mountBind bind-mounts a volume or file; the target is created and
// resolved inside the root, each component without escaping it
// (CVE-2024-45310, threats T9).
func mountBind(root *os.File, m *Mount, stageBinds []string) error {
	if m.IfMissing {
		f, err := openInRoot(root, m.Target)
		if err == nil {
			f.Close()
			return nil
		}
		// Only "no such file" means missing; anything else the image
		// has there is its own and is left alone.
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	t, err := bindTarget(root, m)
	if err != nil {
		return fmt.Errorf("resolve the target inside the app's root: %w", err)
	}
	src := t
	if !m.InPlace {
		if err := notOverPseudo(root, t, m); err != nil {
			t.Close()
			return err
		}
		if src, err = openSource(m); err != nil {
			t.Close()
			return err
		}
		defer src.Close()
		if err := deviceOnDev(src, m); err != nil {
			t.Close()
			return err
		}
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REC)
	if m.NoRecursive {
		flags = unix.MS_BIND
	}
	err = unix.Mount(fdPath(src), fdPath(t), "", flags, "")
	t.Close()
	if err != nil {
		return err
	}
	if flags&unix.MS_REC != 0 && !m.InPlace {
		if err := unstack(root, m, stageBinds); err != nil {
			return err
		}
	}
	if !m.ReadOnly {
		return nil
	}
	// The read-only flag needs a remount of the new mount, reached anew
	// through the root.
	t, err = openInRoot(root, m.Target)
	if err != nil {
		return err
	}
	defer t.Close()
	nodev := uintptr(unix.MS_NODEV)
	nodevAttr := uint64(unix.MOUNT_ATTR_NODEV)
	if m.Device {
		nodev, nodevAttr = 0, 0
	}
	if m.NoRecursive {
		return unix.Mount("", fdPath(t), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|nodev, "")
	}
	// Every mount the recursive bind brought along is made read-only
	// too: a remount changes only the top one, and the app could write
	// through a read-only volume into the host's mounts below it.
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | nodevAttr}
	if err := unix.MountSetattr(int(t.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("make the volume and every mount below it read-only (mount_setattr): %w", err)
	}
	return nil
}

// unstack takes off the app's new bind of m.Source the binds PID 1's
// own root stacked inside it (stageBinds): the recursive bind brought
// them along, where the host has none. What each covered shows again:
// the source's own tree, host mounts included. Deepest first, so that
// a stacked bind inside another comes off before it. A path is reached
// beneath the bind without following a symlink: the volume's content is
// the app's (and the host's) to change, and what is not a stacked bind
// there is left alone.
func unstack(root *os.File, m *Mount, stageBinds []string) error {
	prefix := strings.TrimSuffix(m.Source, "/") + "/"
	var inside []string
	for _, p := range stageBinds {
		if rel, ok := strings.CutPrefix(p, prefix); ok && rel != "" {
			inside = append(inside, rel)
		}
	}
	if len(inside) == 0 {
		return nil
	}
	sort.Slice(inside, func(i, j int) bool { return strings.Count(inside[i], "/") > strings.Count(inside[j], "/") })
	vol, err := openInRoot(root, m.Target)
	if err != nil {
		return err
	}
	defer vol.Close()
	for _, rel := range inside {
		fd, err := unix.Openat2(int(vol.Fd()), rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			continue // gone, or not reached without a symlink: no bind of ours
		}
		err = unix.Unmount("/proc/self/fd/"+strconv.Itoa(fd), unix.MNT_DETACH)
		unix.Close(fd)
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("volume %s: take off the stage1's bind of %s: %w", m.Target, prefix+rel, err)
		}
	}
	return nil
}

// notOverPseudo refuses a bind whose target, resolved inside the root
// through the image's symlinks (data -> /proc), is the root itself or on
// or under /proc, /sys or /dev: the volume would cover the app's root or
// the kernel interfaces the pod mounted there, and then whatever the stage1
// or enter reaches through them (threats T7, T19). The resolved place is
// what the kernel says the descriptor is.
func notOverPseudo(root, t *os.File, m *Mount) error {
	target := m.Target
	rp, err1 := os.Readlink(fdPath(root))
	tp, err2 := os.Readlink(fdPath(t))
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("locate the target: %w", err)
	}
	rel, ok := strings.CutPrefix(tp, rp)
	if !ok || rel != "" && !strings.HasPrefix(rel, "/") {
		return fmt.Errorf("target %s resolves outside the app's root", target)
	}
	if rel == "" {
		return fmt.Errorf("target %s resolves to the app's root", target)
	}
	// On /dev, a device volume's node or a volume on /dev/shm, named
	// as such: not reached through a symlink of the image.
	if OnDev(rel) && rel == target {
		return DevTarget(rel, m.Device, m.File)
	}
	for _, pseudo := range []string{"/proc", "/sys", "/dev"} {
		if rel == pseudo || strings.HasPrefix(rel, pseudo+"/") {
			return fmt.Errorf("target %s resolves to %s, on the app's %s", target, rel, pseudo)
		}
	}
	return nil
}

// deviceOnDev refuses a bind onto the app's /dev/... (other than /dev/shm)
// whose source, as opened, is not a device node: the pod was loaded with
// one there, and the path may lead elsewhere now; what is bound is the
// inode checked here.
func deviceOnDev(src *os.File, m *Mount) error {
	if !OnDev(m.Target) || m.Target == "/dev/shm" {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFCHR && t != unix.S_IFBLK {
		return fmt.Errorf("source %s is not a device node: only a device may be mounted on %s", m.Source, m.Target)
	}
	return nil
}

// openSource opens a bind's source and, when the pod pinned it, checks it
// is still the inode it was when the pod was loaded, before any app ran.
// Another app of the pod that can write the source's parent (a host
// volume nested in another's) could otherwise swap it for a symlink to
// any host path between two starts, and the bind would follow it
// (CVE-2021-30465's swap, on the source side). The mount is then made
// from the very fd checked.
func openSource(m *Mount) (*os.File, error) {
	src, err := os.OpenFile(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if m.SourceIno == 0 {
		return src, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		src.Close()
		return nil, fmt.Errorf("source: %w", err)
	}
	if st.Dev != m.SourceDev || st.Ino != m.SourceIno {
		src.Close()
		return nil, fmt.Errorf("source %s is no longer the file it was when the pod started (replaced, or now a symlink elsewhere)", m.Source)
	}
	return src, nil
}

func bindTarget(root *os.File, m *Mount) (*os.File, error) {
	if !m.File {
		return dirInRoot(root, m.Target)
	}
	parent, err := dirInRoot(root, path.Dir(m.Target))
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	base := path.Base(m.Target)
	pfd := int(parent.Fd())
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return nil, errSymlinkTarget
		case unix.S_IFDIR:
			return nil, fmt.Errorf("%s is a directory in the image", m.Target)
		}
	} else if errors.Is(err, unix.ENOENT) {
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, err
		}
		unix.Close(fd)
	} else {
		return nil, err
	}
	fd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), base), nil
}

// pivot makes rootfs the root and detaches the old one, so nothing of the
// stage1, the other apps or the host stays reachable by path.
func pivot(rootfs string) error {
	if err := unix.Chdir(rootfs); err != nil {
		return fmt.Errorf("chdir rootfs: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}
