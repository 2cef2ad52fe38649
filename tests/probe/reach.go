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
// DURATION it lists /proc over and over, stops every process it has not
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
	for end := time.Now().Add(d); time.Now().Before(end); {
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
