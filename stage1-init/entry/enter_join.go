package entry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// joinApp moves the calling thread into the pod's ipc, uts and net
// namespaces and into the app's mount namespace, whose root becomes the
// thread's root and cwd, and returns the apps' pid namespace, which the
// command is cloned into at its very end (appexec.Launch): the process
// that sets it up stays in the host's pid namespace, out of the apps'
// reach. Both processes are pinned by pidfds first, and the app's is
// checked to be in the pod's apps' namespace, so a pid reused since the
// record was written cannot be joined.
func joinApp(podPid, appPid int) (*os.File, error) {
	podFd, err := unix.PidfdOpen(podPid, 0)
	if err != nil {
		return nil, fmt.Errorf("pod pid %d: %w", podPid, err)
	}
	defer unix.Close(podFd)
	appFd, err := unix.PidfdOpen(appPid, 0)
	if err != nil {
		return nil, fmt.Errorf("app pid %d: %w", appPid, err)
	}
	defer unix.Close(appFd)
	podNS, err1 := os.Readlink("/proc/" + strconv.Itoa(podPid) + "/ns/pid")
	appNSFile, err2 := os.Open("/proc/" + strconv.Itoa(appPid) + "/ns/pid")
	selfNS, err3 := os.Readlink("/proc/self/ns/pid")
	if err := errors.Join(err1, err2, err3); err != nil {
		if appNSFile != nil {
			appNSFile.Close()
		}
		return nil, fmt.Errorf("read pid namespaces: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			appNSFile.Close()
		}
	}()
	if podNS == selfNS {
		return nil, fmt.Errorf("pid %d is not the PID 1 of a pod", podPid)
	}
	if parent, err := parentNS(appNSFile); err != nil || parent != podNS {
		return nil, fmt.Errorf("pid %d is not in the pod (the app is gone)", appPid)
	}
	// The links above were read while the pidfds pinned those pids: if
	// both processes still live, they named these processes.
	for _, fd := range []int{podFd, appFd} {
		if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
			return nil, fmt.Errorf("the pod or the app exited: %w", err)
		}
	}
	// setns(CLONE_NEWNS) refuses a thread sharing its root and cwd with
	// others, as every Go thread does.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, fmt.Errorf("unshare fs: %w", err)
	}
	if err := unix.Setns(podFd, unix.CLONE_NEWIPC|unix.CLONE_NEWUTS|unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("join the pod's namespaces: %w", err)
	}
	if err := unix.Setns(appFd, unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("join the app's mount namespace: %w", err)
	}
	ok = true
	return appNSFile, nil
}

// nsGetParent is linux/nsfs.h's NS_GET_PARENT, _IO(0xb7, 0x2), which
// x/sys/unix does not name.
const nsGetParent = 0xb702

// parentNS names the pid namespace ns is nested in, as /proc/PID/ns/pid
// links read ("pid:[inode]").
func parentNS(ns *os.File) (string, error) {
	fd, err := unix.IoctlRetInt(int(ns.Fd()), nsGetParent)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("pid:[%d]", st.Ino), nil
}

// joinCgroupsOf moves this process into every cgroup the app's first
// process is in, in every hierarchy, before anything is forked: the
// command is then born there, held to the app's limits and killed with the
// app, with no window in which it could fork outside (rkt's enter left
// entered processes outside the app's cgroups: CVE-2019-10147). It must run
// while we still see the host's cgroup mounts.
func joinCgroupsOf(pid int) error {
	app, err1 := procCgroups(strconv.Itoa(pid))
	self, err2 := procCgroups("self")
	mounts, err3 := os.ReadFile("/proc/self/mountinfo")
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	me := []byte(strconv.Itoa(os.Getpid()))
	for ctrl, path := range app {
		if self[ctrl] == path {
			continue
		}
		mp := cgroupMount(string(mounts), ctrl)
		if mp == "" {
			return fmt.Errorf("cgroups: no mount for hierarchy %q", ctrl)
		}
		if err := os.WriteFile(filepath.Join(mp, path, "cgroup.procs"), me, 0); err != nil {
			return fmt.Errorf("join the app's cgroup %s in %s: %w", path, mp, err)
		}
	}
	return nil
}

// procCgroups maps each hierarchy of /proc/PID/cgroup ("" for v2, else
// its controllers as listed, "cpu,cpuacct") to the process's cgroup.
func procCgroups(pid string) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out, nil
}

// cgroupMount finds where the hierarchy is mounted: the cgroup2 mount for
// "", else the cgroup mount whose options hold all its controllers.
func cgroupMount(mountinfo, ctrl string) string {
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		i := slices.Index(f, "-")
		if i < 0 || i+3 >= len(f) || f[3] != "/" {
			continue
		}
		if ctrl == "" && f[i+1] == "cgroup2" {
			return f[4]
		}
		if ctrl == "" || f[i+1] != "cgroup" {
			continue
		}
		opts := strings.Split(f[i+3], ",")
		all := true
		for _, c := range strings.Split(ctrl, ",") {
			all = all && slices.Contains(opts, c)
		}
		if all {
			return f[4]
		}
	}
	return ""
}
