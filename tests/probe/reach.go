package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// spy is what an app that may stop and look into any process of its pid
// namespace (CAP_KILL, CAP_SYS_PTRACE) does to catch a stage1 process: for
// DURATION, or with a second argument FILE until FILE exists (DURATION
// at most), it lists /proc over and over, stops every process it has not
// seen before the moment it sees it (SIGSTOP), reads its name and
// effective capabilities while it cannot move, and lets it go on. It
// reports each kind of process it saw once: "spy saw <argv0> <CapEff>",
// then its own "spy self <CapEff>".
func spy(a []string) error {
	d, err := time.ParseDuration(arg(a, 0))
	if err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	seen := map[string]bool{}
	kinds := map[string]bool{}
	until := arg(a, 1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if until != "" {
			if _, err := os.Stat(until); err == nil {
				break
			}
		}
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return err
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || e.Name() == self || seen[e.Name()] {
				continue
			}
			seen[e.Name()] = true
			stopped := unix.Kill(pid, unix.SIGSTOP) == nil
			name, caps := procKind(e.Name())
			if stopped {
				_ = unix.Kill(pid, unix.SIGCONT)
			}
			if name != "" {
				kinds[name+" "+caps] = true
			}
		}
	}
	var out []string
	for k := range kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	for _, k := range out {
		fmt.Printf("spy saw %s\n", k)
	}
	_, caps := procKind("self")
	fmt.Printf("spy self %s\n", caps)
	return nil
}

// procKind reads a process's argv[0] (base name) and CapEff.
func procKind(pid string) (string, string) {
	b, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		return "", ""
	}
	argv0, _, _ := strings.Cut(string(b), "\x00")
	if i := strings.LastIndexByte(argv0, '/'); i >= 0 {
		argv0 = argv0[i+1:]
	}
	if argv0 == "" {
		argv0 = "-"
	}
	st, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "", ""
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return argv0, strings.TrimSpace(v)
		}
	}
	return argv0, "?"
}

// writeAll tries to open for writing every regular file under dir (at
// most 100000): "write-all DIR ok=N of=M", N the files it could.
func writeAll(dir string) error {
	ok, all := 0, 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || all >= 100000 {
			return nil
		}
		if d.Type().IsRegular() {
			all++
			if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
				ok++
			}
		}
		return nil
	})
	fmt.Printf("write-all %s ok=%d of=%d\n", dir, ok, all)
	return nil
}

// freezePod tries what an app that wants to hold its pod's lock would:
// to freeze the pod's own cgroup, PID 1's (stage1) and its own, to raise
// their pids.max and to move itself into PID 1's, in its own view of the
// cgroup tree and through its pid 1's root, with cgroup2's files and v1's.
// It reports "freeze-pod PATH ERRNO|ok" for each write.
func freezePod() error {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	var paths []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		own := f[2]
		pod := strings.TrimSuffix(strings.TrimSuffix(own, "/app-"+filepath.Base(own)), "/apps")
		for _, root := range []string{"", "/proc/1/root"} {
			for _, mount := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer"} {
				for _, g := range []string{pod, pod + "/stage1", own} {
					paths = append(paths, root+mount+g)
				}
			}
		}
	}
	seen := map[string]bool{}
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, d := range paths {
		if seen[d] {
			continue
		}
		seen[d] = true
		for _, w := range []struct{ file, data string }{
			{"cgroup.freeze", "1"}, {"freezer.state", "FROZEN"}, {"pids.max", "max"}, {"cgroup.procs", string(self)},
		} {
			p := d + "/" + w.file
			if _, err := os.Stat(p); err != nil {
				continue
			}
			res := "ok"
			if err := os.WriteFile(p, []byte(w.data), 0); err != nil {
				res = errnoOf(err)
			}
			fmt.Printf("freeze-pod %s %s\n", p, res)
		}
	}
	fmt.Println("freeze-pod done")
	return nil
}
