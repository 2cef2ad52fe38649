package entry

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errPodGone means the pid names no process: the pod has ended.
var errPodGone = errors.New("no such process")

// openPodInit returns a pidfd on pid once it has checked that pid is the
// PID 1 of the pod whose directory is the cwd, so that a pid file naming
// any other process (planted, or stale and reused) is never signalled.
//
// What is checked is what only the pod's PID 1 has: it is the init of a
// pid namespace below ours (NSpid ends in 1), and it or its parent (the
// run entry point, which cloned it) holds the exclusive flock on this pod
// directory through one of its own fds (fdinfo shows the lock). An app
// cannot forge that: it lives in the pod's pid namespace, so any process
// it makes, nested namespace inits included, has a parent inside the pod,
// and nothing inside the pod can open the pod directory, which is outside
// every app's root, or inherit PID 1's fd on it (close-on-exec). The checks read /proc while the pidfd pins the
// process; a final signal 0 through the pidfd proves that what was read
// was that process and not a successor with a reused pid.
func openPodInit(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, errPodGone
	}
	if err != nil {
		return -1, fmt.Errorf("pid %d: %w", pid, err)
	}
	if err := checkPodInit(pid); err != nil {
		// The pod's own end races a stop (an app's failure stops the
		// pod while rkt stop, or a test, asks the same): a process reaped
		// between the pidfd's opening and the reads of /proc has nothing
		// left to stop, whatever it was.
		gone := errors.Is(unix.PidfdSendSignal(fd, 0, nil, 0), unix.ESRCH)
		unix.Close(fd)
		if gone {
			return -1, errPodGone
		}
		return -1, err
	}
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ESRCH) {
			return -1, errPodGone
		}
		return -1, fmt.Errorf("pid %d: %w", pid, err)
	}
	return fd, nil
}

// checkPodInit is a variable for the test that makes the pod end while
// the checks read /proc.
var checkPodInit = checkPodInitProc

func checkPodInitProc(pid int) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	var nspid []string
	ppid := 0
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		switch k {
		case "NSpid":
			nspid = strings.Fields(v)
		case "PPid":
			ppid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if len(nspid) < 2 || nspid[len(nspid)-1] != "1" {
		return fmt.Errorf("pid %d is not the PID 1 of a pod (not the init of a pid namespace)", pid)
	}
	if !holdsPodLock(pid) && (ppid <= 0 || !holdsPodLock(ppid)) {
		return fmt.Errorf("pid %d is not this pod's PID 1 (neither it nor its parent %d holds the pod's lock)", pid, ppid)
	}
	return nil
}

// holdsPodLock reports whether pid holds the exclusive flock on the pod
// directory (the cwd) through one of its fds.
func holdsPodLock(pid int) bool {
	var pod unix.Stat_t
	if unix.Stat(".", &pod) != nil {
		return false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return false
	}
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(dir+"/fd/"+e.Name(), &st) != nil || st.Dev != pod.Dev || st.Ino != pod.Ino {
			continue
		}
		info, err := os.ReadFile(dir + "/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			if f := strings.Fields(l); len(f) >= 5 && f[0] == "lock:" && f[2] == "FLOCK" && f[4] == "WRITE" {
				return true
			}
		}
	}
	return false
}
