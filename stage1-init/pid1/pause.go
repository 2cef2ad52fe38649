package pid1

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/reaper"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/stage1-init/selfexe"
)

// pause is pod1-pause as PID 1 holds it: the init of the apps' pid
// namespace, nested under PID 1's (appexec's Launch says why).
type pause struct {
	pid int
	// pidns is the apps' pid namespace (-1 until procfs), which the
	// set-up processes (appexec.PidNSFd) clone the apps' processes
	// into. Sent by pod1-pause: setns of a pidfd, or opening
	// /proc/PID/ns/pid, would need to pass the ptrace check on it.
	pidns int
	// sock is where its two procfs instances of the apps' namespace
	// come from (procfs).
	sock *os.File
	// exe is pod1-pause's binary (-1 once closed), kept for
	// cgroupNS.
	exe int
}

// pauseTag tags pod1-pause in the reaper.
type pauseTag struct{}

// startPause clones pod1-pause into a new pid namespace, from the
// detached read-only copy of its binary run handed over (handover.PauseExeFd).
func startPause(r *reaper.Reaper) (*pause, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: socketpair: %w", handover.RolePause, err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "pause"), os.NewFile(uintptr(fds[1]), "pause")
	defer theirs.Close()
	closed := ^uintptr(0)
	files := make([]uintptr, handover.PauseSockFd+1)
	files[0], files[1], files[2] = closed, closed, os.Stderr.Fd()
	files[handover.PauseSockFd] = theirs.Fd()
	var st unix.Stat_t
	err = unix.Fstat(handover.PauseExeFd, &st)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = errors.New("not a regular file")
	}
	exe := -1
	if err == nil {
		exe, err = selfexe.ExecFd(handover.PauseExeFd, files)
	}
	unix.Close(handover.PauseExeFd)
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("%s binary (fd %d): %w", handover.RolePause, handover.PauseExeFd, err)
	}
	pid, err := r.Start(pauseTag{}, func() (int, error) {
		return syscall.ForkExec("/proc/self/fd/"+strconv.Itoa(exe), []string{handover.RolePause}, &syscall.ProcAttr{
			Files: files,
			Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID},
		})
	})
	if err != nil {
		unix.Close(exe)
		ours.Close()
		return nil, fmt.Errorf("start %s: %w", handover.RolePause, err)
	}
	return &pause{pid: pid, pidns: -1, sock: ours, exe: exe}, nil
}

// closeExe closes pod1-pause's binary: nothing is started from it any
// more.
func (pz *pause) closeExe() {
	if pz.exe >= 0 {
		unix.Close(pz.exe)
		pz.exe = -1
	}
}

// cgroupNSTag tags pod1-cgroupns in the reaper, which reaps it.
type cgroupNSTag struct{}

// cgroupNS makes the apps' cgroup namespace, rooted at apps, the apps'
// cgroup of a unified hierarchy, which must hand no controller down yet
// (a cgroup that does holds no process), and returns it. pod1-pause's
// binary, as pod1-cgroupns, is cloned into apps (CLONE_INTO_CGROUP: no
// process is moved), unshares its cgroup namespace, which is then rooted
// there, sends it and exits.
//
// In it the apps see their own cgroups as the pod's apps' cgroup holds
// them, as "0::/app-<name>" in /proc/self/cgroup, and their pid 1's root
// holds that cgroup at /sys/fs/cgroup (giveRoot): rkt's apps find their
// limits at /proc/1/root/sys/fs/cgroup/<their cgroup> on a unified host,
// as in rkt's stage1, without any other cgroup of the host being shown.
func (pz *pause) cgroupNS(r *reaper.Reaper, apps string) (int, error) {
	defer pz.closeExe()
	if pz.exe < 0 {
		return -1, fmt.Errorf("%s: no binary", handover.RoleCgroupNS)
	}
	dir, err := unix.Open(apps, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", handover.RoleCgroupNS, err)
	}
	defer unix.Close(dir)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: socketpair: %w", handover.RoleCgroupNS, err)
	}
	defer unix.Close(fds[0])
	closed := ^uintptr(0)
	files := make([]uintptr, handover.PauseSockFd+1)
	files[0], files[1], files[2] = closed, closed, os.Stderr.Fd()
	files[handover.PauseSockFd] = uintptr(fds[1])
	_, err = r.Start(cgroupNSTag{}, func() (int, error) {
		return syscall.ForkExec("/proc/self/fd/"+strconv.Itoa(pz.exe), []string{handover.RoleCgroupNS}, &syscall.ProcAttr{
			Files: files,
			Sys:   &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: dir},
		})
	})
	unix.Close(fds[1])
	if err != nil {
		return -1, fmt.Errorf("start %s: %w", handover.RoleCgroupNS, err)
	}
	got, err := recvFds(fds[0], 'c', 1)
	if err != nil {
		return -1, fmt.Errorf("%s: %w (see its error above)", handover.RoleCgroupNS, err)
	}
	return got[0], nil
}

// recvFds receives what on sock, with n descriptors (close-on-exec).
func recvFds(sock int, what byte, n int) ([]int, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(n*4))
	for {
		m, oobn, _, _, err := unix.Recvmsg(sock, b[:], oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var got []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for i := range msgs {
				if fds, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					got = append(got, fds...)
				}
			}
		}
		if m != 1 || b[0] != what || len(got) != n {
			for _, fd := range got {
				unix.Close(fd)
			}
			return nil, errors.New("ended before it sent what it makes")
		}
		return got, nil
	}
}

// procfs receives the two procfs instances of the apps' pid namespace
// pod1-pause makes (one for the spare, one for PID 1's root), and the
// namespace; it waits for them.
func (pz *pause) procfs() ([2]int, error) {
	got, err := recvFds(int(pz.sock.Fd()), 'p', 3)
	if err != nil {
		return [2]int{-1, -1}, fmt.Errorf("%s: the apps' procfs: %w (see its error above)", handover.RolePause, err)
	}
	pz.pidns = got[2]
	return [2]int{got[0], got[1]}, nil
}

// giveRoot hands pod1-pause, read-only, the trees its root holds: the
// pod's cgroups, at their paths, cloned from PID 1's own root (rkt's apps
// read their limits through /proc/1/root/sys/fs/cgroup, their pid 1's
// root, as rkt's stage1 let them; rkt's suite does), and the bounding
// set it keeps: keep, the apps' (podplan's AppsBoundingSet; nil: all of
// PID 1's), which rkt's apps read as their pid 1's (rkt's TestCaps).
// Without a capability in any other set, with no_new_privs and
// SECBIT_NOROOT locked, no exec can raise one from it. awaitRoot waits
// until it has left everything else behind.
//
// With the apps' cgroup namespace (appsOnly), its root, the apps' cgroup,
// is what the apps' pid 1's root holds, at /sys/fs/cgroup, where the
// apps' own paths ("/app-<name>") lead from it.
func (pz *pause) giveRoot(cg *cgroups.Group, appsOnly bool, keep []string) error {
	mask := ^uint64(0)
	if keep != nil {
		mask = 0
		for _, n := range keep {
			c, err := appexec.ParseCapability(n)
			if err != nil {
				return fmt.Errorf("%s's bounding set: %w", handover.RolePause, err)
			}
			mask |= 1 << uint(c)
		}
	}
	// Each tree's directory in PID 1's root, and its place in ours.
	var paths, places []string
	switch {
	case cg != nil && appsOnly:
		paths, places = []string{cg.Sub(cgroups.AppsName).V2}, []string{"/sys/fs/cgroup"}
	case cg != nil:
		for _, d := range cg.Dirs() {
			if !slices.Contains(paths, d) {
				paths = append(paths, d)
			}
		}
		places = paths
	}
	msg := append(fmt.Appendf([]byte{'r'}, "%016x", mask), 0)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i, d := range paths {
		fd, err := unix.OpenTree(unix.AT_FDCWD, d, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("%s's root: %s: %w", handover.RolePause, d, err)
		}
		fds = append(fds, fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("%s's root: %s: %w", handover.RolePause, d, err)
		}
		msg = append(append(msg, places[i]...), 0)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(int(pz.sock.Fd()), msg, oob, nil, 0); err != nil {
		return fmt.Errorf("%s's root: %w", handover.RolePause, err)
	}
	return nil
}

// awaitRoot waits for pod1-pause to say it holds nothing any more.
func (pz *pause) awaitRoot() error {
	defer pz.sock.Close()
	var b [1]byte
	for {
		n, err := unix.Read(int(pz.sock.Fd()), b[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != 1 || b[0] != 'd' {
			return fmt.Errorf("%s ended before it left the pod's mounts (see its error above)", handover.RolePause)
		}
		return nil
	}
}

// attachAppsProc puts procfs, a detached procfs of the apps' pid
// namespace, read-only at appexec.AppsProc under root (PID 1's new root,
// being built): the set-up processes PID 1 forks from then on clone it
// for their app's /proc.
func attachAppsProc(root string, procfs int) error {
	defer unix.Close(procfs)
	dst := root + appexec.AppsProc
	if err := unix.Mkdir(dst, 0o555); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(procfs, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("apps' procfs: %w", err)
	}
	return unix.MoveMount(procfs, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// appsCgroupNS makes the apps' cgroup namespace on a host whose only
// hierarchy is cgroup v2 (cgroupNS says why), and then lets the apps'
// cgroup hand the pod's controllers down to the apps' own (run leaves
// that to PID 1 there: pod.AppsControllers); it returns -1 elsewhere.
// A kernel that cannot clone into a cgroup (before 5.7) leaves the apps
// in the host's cgroup namespace, as on the other layouts, said once.
func appsCgroupNS(pod *podplan.Pod, pz *pause, r *reaper.Reaper) (int, error) {
	cg := pod.Cgroup
	if cg == nil || !cg.Unified {
		pz.closeExe()
		return -1, nil
	}
	apps := cg.Sub(cgroups.AppsName)
	ns, err := pz.cgroupNS(r, apps.V2)
	if err != nil {
		logx.Warnf("the apps' cgroup namespace: %v; the apps see the host's", err)
		ns = -1
	}
	// pod1-cgroupns has sent it; its exit takes it out of the cgroup,
	// which may not hand controllers down before.
	for deadline := time.Now().Add(5 * time.Second); !apps.Empty(); {
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("%s did not leave the apps' cgroup", handover.RoleCgroupNS)
		}
		time.Sleep(50 * time.Microsecond)
	}
	if err := apps.PassOn(pod.AppsControllers); err != nil {
		if ns >= 0 {
			unix.Close(ns)
		}
		return -1, fmt.Errorf("the apps' cgroup: %w", err)
	}
	return ns, nil
}
