package entry

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/podpid"
)

// joinApp moves the calling thread into the pod's ipc, uts and net
// namespaces and into the app's mount namespace, whose root becomes the
// thread's root and cwd, and returns the apps' pid namespace, which the
// command is cloned into at its very end (appexec.Launch): the process
// that sets it up stays in the host's pid namespace, out of the apps'
// reach. Both processes are pinned by pidfds first, and the app's is
// checked to be in the pod's apps' namespace, so a pid reused since the
// record was written cannot be joined.
//
// It also returns the app's cgroup namespace when it is not ours (the
// apps' own, on a host with only cgroup v2), nil otherwise: the command
// is cloned into it, as the app's processes are.
func joinApp(pid1 *podpid.PID1, appPid int) (pidNS, cgroupNS *os.File, err error) {
	podPid, podFd := pid1.Pid, pid1.Fd()
	appFd, err := unix.PidfdOpen(appPid, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("app pid %d: %w", appPid, err)
	}
	defer unix.Close(appFd)
	podNS, err1 := os.Readlink("/proc/" + strconv.Itoa(podPid) + "/ns/pid")
	appNSFile, err2 := os.Open("/proc/" + strconv.Itoa(appPid) + "/ns/pid")
	selfNS, err3 := os.Readlink("/proc/self/ns/pid")
	if err := errors.Join(err1, err2, err3); err != nil {
		if appNSFile != nil {
			appNSFile.Close()
		}
		return nil, nil, fmt.Errorf("read pid namespaces: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			appNSFile.Close()
		}
	}()
	cgroupNS, err = appCgroupNS(appPid)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if !ok && cgroupNS != nil {
			cgroupNS.Close()
		}
	}()
	if podNS == selfNS {
		return nil, nil, fmt.Errorf("pid %d is not the PID 1 of a pod", podPid)
	}
	if parent, err := parentNS(appNSFile); err != nil || parent != podNS {
		return nil, nil, fmt.Errorf("pid %d is not in the pod (the app is gone)", appPid)
	}
	// The links above were read while the pidfds pinned those pids: if
	// both processes still live, they named these processes.
	for _, fd := range []int{podFd, appFd} {
		if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
			return nil, nil, fmt.Errorf("the pod or the app exited: %w", err)
		}
	}
	// setns(CLONE_NEWNS) refuses a thread sharing its root and cwd with
	// others, as every Go thread does.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, nil, fmt.Errorf("unshare fs: %w", err)
	}
	if err := unix.Setns(podFd, unix.CLONE_NEWIPC|unix.CLONE_NEWUTS|unix.CLONE_NEWNET); err != nil {
		return nil, nil, fmt.Errorf("join the pod's namespaces: %w", err)
	}
	if err := unix.Setns(appFd, unix.CLONE_NEWNS); err != nil {
		return nil, nil, fmt.Errorf("join the app's mount namespace: %w", err)
	}
	ok = true
	return appNSFile, cgroupNS, nil
}

// appCgroupNS opens the cgroup namespace of the app's process, pid, if it
// is not ours; nil if it is.
func appCgroupNS(pid int) (*os.File, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/cgroup")
	if err != nil {
		return nil, fmt.Errorf("the app's cgroup namespace: %w", err)
	}
	var app, self unix.Stat_t
	err = unix.Fstat(int(f.Fd()), &app)
	if err == nil {
		err = unix.Stat("/proc/self/ns/cgroup", &self)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the app's cgroup namespace: %w", err)
	}
	if app.Ino == self.Ino && app.Dev == self.Dev {
		f.Close()
		return nil, nil
	}
	return f, nil
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
	if err := cgroups.JoinOf(pid); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	return nil
}
