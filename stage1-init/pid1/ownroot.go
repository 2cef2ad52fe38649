package pid1

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podplan"
)

// PID 1 in a root of its own (threats T4, T19).
//
// PID 1 is cloned into a copy of the host's mount namespace. Anything in
// the pod that passes the ptrace read check on it (an app given
// CAP_SYS_PTRACE) can walk /proc/1/root, /proc/1/cwd and /proc/1/fd/*, and
// a root app that could ptrace it gets its capabilities. So once it has set
// up the pod's namespaces, PID 1 pivots into a tmpfs that holds only what
// it and the app set-up processes it forks reach by path, each at the path
// it has on the host, so that no other code changes:
//
//   - the pod directory, read-only, recursively (the stage1 image, which
//     rkt's gc later runs as host root, and the apps' trees), the stage1's
//     rkt/ directory included (statuses, supervisor-status, the saved
//     specs and options, the control and attach sockets);
//   - writable on top of it, for a mutable pod, the shared volumes
//     directory;
//   - each volume source of the pod's apps, as it is;
//   - the pod's own cgroups, read-only, and no other part of any
//     hierarchy;
//   - a procfs of the pod's pid namespace with only its processes
//     (subset=pid: no /proc/sys, no sysrq-trigger), and /dev/null.
//
// An app's set-up process lifts the read-only flag from its own copy of
// its root (appexec), which only a process in PID 1's mount namespace with
// CAP_SYS_ADMIN could do to PID 1's.
//
// What PID 1 writes after the pivot (statuses, the ready mark, the attach
// sockets, the apps' cgroups) it writes through writable copies of those
// trees made before it (kept), reached by no path of its root: nothing the host side or PID 1 trusts is writable by a path
// of PID 1's root, should an app ever reach /proc/1/root. Of rkt/pod1, the
// run's options and the pod's cgroup list are out of even those
// descriptors' reach: PID 1 sees that directory through a read-only mount
// of its own (pinPod1Dir).
//
// PID 1 keeps no descriptor on anything of the host: those copies, and the
// one it keeps to learn host pids (a copy of its own fdinfo directory),
// are detached trees, from which ".." leads nowhere.

// hostFdinfo is a descriptor on PID 1's own /proc/<pid>/fdinfo as the
// host's procfs shows it (-1 before enterOwnRoot): a pidfd's fdinfo read
// there names the process by its host pid.
var hostFdinfo = -1

// ownRootBase is where the new root is built before the pivot: a
// directory every Linux host has, whose contents PID 1 no longer needs.
const ownRootBase = "/dev"

// bindSpec is one tree put into the new root at the path it has now.
// journalDir holds systemd-journald's sockets.
const journalDir = "/run/systemd/journal"

type bindSpec struct {
	path     string
	readOnly bool
	file     bool
	// source is the tree bound at path, when it is not path itself.
	source string
}

// enterOwnRoot moves PID 1 into its own root and reduces its capability
// bounding set. It runs once, after podenv.Setup (which needs the host's
// /proc and made every mount a slave) and before PID 1 opens anything of
// the pod; the cwd, the pod directory, is the same path afterwards.
func enterOwnRoot(pod *podplan.Pod, appsProc, shm int) error {
	podDir, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/proc/self/fdinfo", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("own root: keep fdinfo: %w", err)
	}
	hostFdinfo = fd
	if pod.Mutable {
		// Volumes of apps added later are made here, by the add entry
		// point on the host: the directory must exist to be bound.
		if err := os.MkdirAll(filepath.Join(podDir, layout.SharedVolumes), 0o750); err != nil {
			return fmt.Errorf("own root: %w", err)
		}
	}
	if err := pinPod1Dir(podDir); err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	if err := keepWritable(pod, podDir); err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	binds := ownRootBinds(pod, podDir)
	// Every tree is cloned before anything is covered: a source may be
	// under the directory the new root is built on.
	trees := make([]int, len(binds))
	defer func() {
		for _, fd := range trees {
			if fd > 0 {
				unix.Close(fd)
			}
		}
	}()
	for i, b := range binds {
		fd, err := cloneTree(b)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // an optional source the pod does not have
			}
			return fmt.Errorf("own root: %s: %w", b.path, err)
		}
		trees[i] = fd
	}
	if err := unix.Mount("tmpfs", ownRootBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("own root: mount tmpfs: %w", err)
	}
	for i, b := range binds {
		if trees[i] <= 0 {
			continue
		}
		if err := attach(trees[i], b); err != nil {
			return fmt.Errorf("own root: %s: %w", b.path, err)
		}
		stageBinds = append(stageBinds, b.path)
	}
	if err := mountPodProc(ownRootBase + "/proc"); err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	if err := attachAppsProc(ownRootBase, appsProc); err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	if pod.Console {
		if err := attachConsolePts(ownRootBase); err != nil {
			return fmt.Errorf("own root: %w", err)
		}
	}
	if err := attachPodShm(ownRootBase, shm); err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	// Nothing may be created in the tmpfs itself: every path PID 1
	// follows from / runs through it. The flag is the mount's (a bind
	// remount), not the file system's: app/add lifts it for a moment to
	// make a mount point (makeMountPoint), which a read-only superblock
	// would refuse.
	if err := unix.Mount("", ownRootBase, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("own root: read-only tmpfs: %w", err)
	}
	if err := pivotInto(ownRootBase, podDir); err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	if err := reduceBoundingSet(pod); err != nil {
		return fmt.Errorf("own root: %w", err)
	}
	return nil
}

// stageBinds are the paths of ownRootBinds attached in PID 1's root, which
// each app's set-up takes off the volumes that bring them along
// (appexec.Spec.StageBinds).
var stageBinds []string

// ownRootBinds lists what the new root holds, parents before children.
func ownRootBinds(pod *podplan.Pod, podDir string) []bindSpec {
	binds := []bindSpec{
		// Where the apps' stdin comes from when they have none.
		{path: "/dev/null", file: true},
		{path: podDir, readOnly: true},
		// The journal's sockets, which PID 1 sends the apps' lines to
		// by path (go-systemd's journal package): read-only, as sending
		// on a socket needs no writable mount. Optional: a host without
		// a journal has no such directory.
		{path: journalDir, readOnly: true},
	}
	if pod.Mutable {
		binds = append(binds, bindSpec{path: filepath.Join(podDir, layout.SharedVolumes)})
	}
	seen := map[string]bool{}
	for _, a := range pod.Apps {
		for _, m := range a.Spec.Mounts {
			if m.Kind != appexec.KindBind || seen[m.Source] || !filepath.IsAbs(m.Source) {
				continue
			}
			seen[m.Source] = true
			binds = append(binds, bindSpec{path: filepath.Clean(m.Source), file: m.File, readOnly: m.Optional})
		}
	}
	for _, v := range pod.VolumeSources {
		if !seen[v.Path] && filepath.IsAbs(v.Path) {
			seen[v.Path] = true
			binds = append(binds, bindSpec{path: filepath.Clean(v.Path), file: v.File})
		}
	}
	if cg := pod.Cgroup; cg != nil {
		dirs := []string{}
		if cg.V2 != "" {
			dirs = append(dirs, cg.V2)
		}
		for _, d := range cg.V1 {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		for _, d := range dirs {
			binds = append(binds, bindSpec{path: d, readOnly: true})
		}
	}
	if pod.Logs.PodJournal {
		// journalctl -M rkt-<uuid> reads the journal of the machine's
		// leader, PID 1, below its root (machined's
		// OpenMachineRootDirectory): the pod's own, read-only. Not
		// where a tree of the host already covers the place, whose
		// copy would be changed.
		j := bindSpec{path: path.Join(layout.HostJournalDir, layout.MachineID(pod.UUID)),
			source: filepath.Join(podDir, layout.PodJournalDir, layout.MachineID(pod.UUID)), readOnly: true}
		covered := false
		for _, b := range binds {
			covered = covered || b.path == "/" || strings.HasPrefix(j.path+"/", b.path+"/")
		}
		if !covered {
			binds = append(binds, j)
		}
	}
	sort.SliceStable(binds, func(i, j int) bool {
		return strings.Count(binds[i].path, "/") < strings.Count(binds[j].path, "/")
	})
	return binds
}

// kept are the directories PID 1 writes after the pivot, writable
// detached copies made before it of trees its root shows read-only: the
// stage1's rkt/ directory (-1 before enterOwnRoot) and each of the pod's
// cgroup directories. Being copies, from which ".." leads nowhere, they
// reach nothing of the host beyond themselves.
var kept = struct {
	rkt     int
	cgroups map[string]int
}{rkt: -1}

// keepWritable makes the copies of kept.
func keepWritable(pod *podplan.Pod, podDir string) error {
	const flags = unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_SYMLINK_NOFOLLOW
	// Recursive: the pinned rkt/pod1 comes along, read-only.
	fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(podDir, layout.RktDir), flags|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("keep %s: %w", layout.RktDir, err)
	}
	kept.rkt = fd
	if pod.Cgroup == nil {
		return nil
	}
	kept.cgroups = map[string]int{}
	for _, d := range pod.Cgroup.Dirs() {
		if _, ok := kept.cgroups[d]; ok {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, d, flags)
		if err != nil {
			return fmt.Errorf("keep cgroup %s: %w", d, err)
		}
		kept.cgroups[d] = fd
	}
	return nil
}

// fdDir names the directory open as fd: a path that works whatever the
// root, for every system call that takes one, sockets' bind included.
func fdDir(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// written is where PID 1 writes p, a path of layout's below layout.RktDir
// (relative to the pod directory, the cwd): p itself before the pivot,
// below kept.rkt after it.
func written(p string) string {
	rel, ok := strings.CutPrefix(p, layout.RktDir)
	if !ok || kept.rkt < 0 || rel != "" && rel[0] != '/' {
		return p
	}
	if rel == "" {
		// The directory itself, not the link to it: openers refuse
		// to follow a link at the last component.
		rel = "/."
	}
	return fdDir(kept.rkt) + rel
}

// writableCgroup is g, the pod's group or one below it, with each
// directory named through kept.cgroups: PID 1 makes and limits its apps'
// cgroups through it once its root shows the pod's read-only.
func writableCgroup(g *cgroups.Group) *cgroups.Group {
	if g == nil {
		return nil
	}
	w := &cgroups.Group{V1: map[string]string{}, Unified: g.Unified}
	name := func(d string) string {
		for k, fd := range kept.cgroups {
			if rest, ok := strings.CutPrefix(d, k); ok && (rest == "" || rest[0] == '/') {
				return fdDir(fd) + rest
			}
		}
		return d
	}
	if g.V2 != "" {
		w.V2 = name(g.V2)
	}
	for c, d := range g.V1 {
		w.V1[c] = name(d)
	}
	return w
}

// pinPod1Dir puts, in PID 1's mount namespace, a read-only copy of the
// stage1's rkt/pod1 directory over it, and a writable copy of its apps/
// (the saved specs, which PID 1 writes for the apps it adds) over that:
// the run's options and the pod's cgroup list, which the entry points
// trust, are then out of reach of every descriptor PID 1 holds, kept.rkt
// included (a walk down from it crosses the read-only mount). The host's
// view is untouched: PID 1's mounts do not propagate (podenv made them
// slaves). The control socket is there already (control.Listen).
func pinPod1Dir(podDir string) error {
	dir := filepath.Join(podDir, layout.Pod1Dir)
	const flags = unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_SYMLINK_NOFOLLOW
	apps, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(podDir, layout.AppSpecDir), flags)
	if err != nil {
		return fmt.Errorf("pin %s: %w", layout.AppSpecDir, err)
	}
	defer unix.Close(apps)
	ro, err := unix.OpenTree(unix.AT_FDCWD, dir, flags)
	if err != nil {
		return fmt.Errorf("pin %s: %w", layout.Pod1Dir, err)
	}
	defer unix.Close(ro)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(ro, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("pin %s: read-only: %w", layout.Pod1Dir, err)
	}
	if err := unix.MoveMount(ro, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("pin %s: %w", layout.Pod1Dir, err)
	}
	if err := unix.MoveMount(apps, "", unix.AT_FDCWD, filepath.Join(podDir, layout.AppSpecDir), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("pin %s: %w", layout.AppSpecDir, err)
	}
	return nil
}

// cloneTree makes a detached copy of b's tree, read-only if asked: the
// copy's flags are its own, so the host's view is untouched.
func cloneTree(b bindSpec) (int, error) {
	src := b.path
	if b.source != "" {
		src = b.source
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, err
	}
	if b.readOnly {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("make read-only: %w", err)
		}
	}
	return fd, nil
}

// attach puts a cloned tree at its own path under the new root, creating
// the path in the tmpfs if no tree attached before holds it. Raw system
// calls, not os.MkdirAll and os.OpenFile: no stat walk up the path, no
// poller registration of a file that is only created.
func attach(tree int, b bindSpec) error {
	dst := ownRootBase + b.path
	if err := mkdirParents(dst); err != nil {
		return err
	}
	if b.file {
		fd, err := unix.Open(dst, unix.O_CREAT|unix.O_RDONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		} else if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EEXIST) {
			return err
		}
	} else if err := unix.Mkdir(dst, 0o755); err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EROFS) {
		return err
	}
	return unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// mkdirParents makes every missing directory above p, an absolute clean
// path, from the top down; one that exists, or is on a read-only tree
// attached before, is left as it is.
func mkdirParents(p string) error {
	for i := 1; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		if err := unix.Mkdir(p[:i], 0o755); err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EROFS) {
			return err
		}
	}
	return nil
}

// mountPodProc mounts a procfs of the pod's pid namespace (PID 1's) with
// its processes only: the stage1 needs /proc/self, and nothing of what a
// full procfs offers the host's root (/proc/sys, /proc/sysrq-trigger).
func mountPodProc(target string) error {
	if err := os.Mkdir(target, 0o555); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen proc: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "subset", "pid"); err != nil {
		return fmt.Errorf("procfs subset=pid: %w", err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("create procfs: %w", err)
	}
	mfd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("fsmount proc: %w", err)
	}
	defer unix.Close(mfd)
	return unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// pivotInto makes newRoot the root, detaches the old one and returns to
// cwd, now a path inside the new root.
func pivotInto(newRoot, cwd string) error {
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return unix.Chdir(cwd)
}

// reduceBoundingSet drops from every thread's bounding set what
// the pod's BoundingSet leaves out and is still there (prctl acts on the calling
// thread; the runtime's threads fork the app set-up processes, so all must
// drop). run has normally dropped all of it on the thread that cloned us
// (forkPID1), so this only reads: each all-threads drop stops and signals
// every thread of PID 1, which put tens of them on the pod's start path.
// It stays for a PID 1 cloned without the reduced set (run could not set
// it up on its thread), which then pays for it.
func reduceBoundingSet(pod *podplan.Pod) error {
	keep := pod.BoundingSet()
	if keep == nil {
		return nil
	}
	last, err := capability.LastCap()
	if err != nil {
		return err
	}
	for c := capability.Cap(0); c <= last; c++ {
		name := "CAP_" + strings.ToUpper(c.String())
		if slices.Contains(keep, name) {
			continue
		}
		if have, err := capability.GetBound(c); err == nil && !have {
			// Every thread has the same bounding set: they were
			// all cloned from the first after exec, and every drop
			// here is on all of them.
			continue
		}
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e != 0 {
			return fmt.Errorf("drop %s from the bounding set: %w", name, e)
		}
	}
	return nil
}

// clearInheritable empties PID 1's inheritable set on every thread, before
// it forks anything. run cloned it with an inheritable set equal to its
// permitted one (forkPID1), so that PID 1 keeps run's permitted set
// although it starts with the pod's reduced bounding set; a process PID 1
// starts and that executes a program as root would regain through it
// every capability the bounding set no longer holds. One all-threads
// capset; nothing when the set is already empty.
func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("clear the inheritable capabilities: %w", e)
	}
	return nil
}

// capsWithinBounds refuses an app (added to a mutable pod) that asks for a
// capability PID 1 no longer has: it would run without it.
func capsWithinBounds(s *appexec.Spec) error {
	if s.Isolation.UnrestrictedCapabilities {
		return nil
	}
	for _, n := range s.Isolation.Capabilities {
		c, err := appexec.ParseCapability(n)
		if err != nil {
			return err
		}
		if have, err := capability.GetBound(c); err == nil && !have {
			return fmt.Errorf("isolator os/linux/capabilities: %s is not in this pod's bounding set (a mutable pod's apps may have rkt's default capabilities and those of the apps it started with)", n)
		}
	}
	return nil
}

// hostPidVia reads a pidfd's fdinfo through hostFdinfo, the host procfs's
// view of PID 1's descriptors. ok is false before enterOwnRoot.
func hostPidVia(pidfd int) (pid int, ok bool) {
	if hostFdinfo < 0 {
		return 0, false
	}
	fd, err := unix.Openat(hostFdinfo, strconv.Itoa(pidfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, true
	}
	f := os.NewFile(uintptr(fd), "fdinfo")
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	for _, l := range strings.Split(string(b[:n]), "\n") {
		if v, found := strings.CutPrefix(l, "Pid:"); found {
			pid, _ = strconv.Atoi(strings.TrimSpace(v))
			return pid, true
		}
	}
	return 0, true
}
