package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// planted is what the probe does when something runs it as the stage1
// (the name or the flag an entry point would be given): it leaves a
// marker in the app's /vol, a host directory, saying who ran it.
func planted() bool {
	base := filepath.Base(os.Args[0])
	if base != "enter" && base != "pod1-app" && base != "pod1-init" && !slices.Contains(os.Args, "--pod1-exec-in-app") {
		return false
	}
	st, _ := os.ReadFile("/proc/self/status")
	msg := fmt.Sprintf("planted code ran: argv=%q\n%s", os.Args, st)
	_ = os.WriteFile("/vol/planted-ran", []byte(msg), 0o644)
	fmt.Fprint(os.Stderr, msg)
	return true
}

// plantProc covers the app's own /proc with a tmpfs in which every path
// the stage1 might execute itself through (/proc/self/exe,
// /proc/self/fd/N, /proc/1/exe...) is a copy of this probe.
func plantProc() error {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "/proc", "tmpfs", 0, "mode=755"); err != nil {
		return fmt.Errorf("mount over /proc: %w", err)
	}
	n := 0
	for _, d := range []string{"self", "thread-self", "1"} {
		if err := os.MkdirAll("/proc/"+d+"/fd", 0o755); err != nil {
			return err
		}
		files := []string{"/proc/" + d + "/exe"}
		for fd := 0; fd < 16; fd++ {
			files = append(files, "/proc/"+d+"/fd/"+strconv.Itoa(fd))
		}
		for _, f := range files {
			if err := os.WriteFile(f, self, 0o755); err != nil {
				return err
			}
			n++
		}
	}
	fmt.Printf("plant-proc planted %d\n", n)
	return nil
}

// fdLinks prints where each of a process's fds leads, or the error, and
// which are directories.
func fdLinks(pid string) error {
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		fmt.Printf("fdlinks %s error %s\n", pid, errnoOf(err))
		return nil
	}
	for _, e := range ents {
		t, err := os.Readlink("/proc/" + pid + "/fd/" + e.Name())
		if err != nil {
			t = errnoOf(err)
		}
		kind := ""
		if st, err := os.Stat("/proc/" + pid + "/fd/" + e.Name()); err == nil && st.IsDir() {
			kind = " (dir)"
		}
		fmt.Printf("fdlinks %s %s -> %s%s\n", pid, e.Name(), t, kind)
	}
	return nil
}

// peerRoots waits until every app tagged in want (comma-separated) runs,
// then tries each one's /proc/PID/root: "peer-root TAG ok|ERRNO". Tags are
// "tag NAME" arguments on the apps' command lines.
func peerRoots(want string) error {
	tags := strings.Split(want, ",")
	found := map[string]string{}
	for deadline := time.Now().Add(10 * time.Second); len(found) < len(tags) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(os.Getpid()) {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil {
				continue
			}
			argv := strings.Split(string(b), "\x00")
			if i := slices.Index(argv, "tag"); i >= 0 && i+1 < len(argv) && slices.Contains(tags, argv[i+1]) {
				found[argv[i+1]] = e.Name()
			}
		}
	}
	for _, tag := range tags {
		pid, ok := found[tag]
		if !ok {
			fmt.Printf("peer-root %s missing\n", tag)
			continue
		}
		_, err := os.ReadDir("/proc/" + pid + "/root/")
		res := "ok"
		if err != nil {
			res = errnoOf(err)
		}
		fmt.Printf("peer-root %s %s\n", tag, res)
	}
	return nil
}

// inPID1Pod tries op (open-write, touch, mkdir) on rel, a path in the pod
// directory as PID 1 (pid, 1 by default: run on the host, the probe names
// the pod's PID 1 by its host pid) sees it: /proc/PID/root and PID 1's
// cwd, the pod directory. It reports "in-pid1-pod OP REL ERRNO".
func inPID1Pod(op, rel, pid string) error {
	if pid == "" {
		pid = "1"
	}
	d, err := os.Readlink("/proc/" + pid + "/cwd")
	if err != nil {
		fmt.Printf("in-pid1-pod %s %s cwd-%s\n", op, rel, errnoOf(err))
		return nil
	}
	p := "/proc/" + pid + "/root" + d + "/" + rel
	switch op {
	case "open-write":
		var fd int
		fd, err = unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
	case "touch":
		var fd int
		fd, err = unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
	case "mkdir":
		err = unix.Mkdir(p, 0o755)
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	fmt.Printf("in-pid1-pod %s %s %s\n", op, rel, errnoOf(err))
	return nil
}
