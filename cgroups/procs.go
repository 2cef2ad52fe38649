package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// trackDir is the directory whose cgroup.procs lists the group's
// processes: v2 when there is one, else the first v1 controller.
func (g *Group) trackDir() string {
	if g.V2 != "" {
		return g.V2
	}
	for _, c := range v1Controllers {
		if d, ok := g.V1[c]; ok {
			return d
		}
	}
	return ""
}

// Procs lists the processes in the group.
func (g *Group) Procs() ([]int, error) {
	d := g.trackDir()
	if d == "" {
		return nil, nil
	}
	b, err := readFile(filepath.Join(d, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// Empty reports whether no process is left in the group.
func (g *Group) Empty() bool {
	pids, err := g.Procs()
	return err == nil && len(pids) == 0
}

// Kill sends SIGKILL to every process in the group. With cgroup v2's
// cgroup.kill the kernel does it atomically, forks in flight included (a
// fork bomb cannot outrun it); otherwise every listed pid is killed, and
// callers repeat until Empty.
func (g *Group) Kill() error {
	if g.V2 != "" {
		err := os.WriteFile(filepath.Join(g.V2, "cgroup.kill"), []byte("1"), 0)
		if err == nil || errors.Is(err, os.ErrNotExist) && !g.exists() {
			return nil
		}
	}
	pids, err := g.Procs()
	if err != nil {
		return err
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	return nil
}

// Signal sends sig to every process in the group.
func (g *Group) Signal(sig unix.Signal) {
	pids, _ := g.Procs()
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
}

func (g *Group) exists() bool {
	_, err := os.Stat(g.trackDir())
	return err == nil
}

// Remove deletes the group from every hierarchy. It fails while processes
// remain. rmdir can fail with EBUSY for a moment after the last process
// left (its exit is still being accounted): Remove retries for a while,
// which PID 1's loop must not; it uses TryRemove.
func (g *Group) Remove() error {
	var err error
	for i := 0; i < 100; i++ {
		if err = g.TryRemove(); !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return err
}

// TryRemove is Remove without waiting: a directory still busy is left,
// and the error says so (errors.Is(err, unix.EBUSY)); a later call
// removes what is left (a directory already gone is not an error).
func (g *Group) TryRemove() error {
	var errs []error
	for _, d := range g.dirs() {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// SetPidsMax limits how many tasks (processes and threads) the group may
// hold; a fork bomb in one app then fails with EAGAIN instead of starving
// the pod (threats P9).
func (g *Group) SetPidsMax(n int) error {
	d := g.V1["pids"]
	if d == "" && g.Unified {
		d = g.V2
	}
	if d == "" {
		return errors.New("no pids controller")
	}
	return writeFile(filepath.Join(d, "pids.max"), []byte(strconv.Itoa(n)))
}

// PidsMax reads the group's pids.max: 0 when it has none ("max") or no
// pids controller.
func (g *Group) PidsMax() int {
	d := g.V1["pids"]
	if d == "" && g.Unified {
		d = g.V2
	}
	if d == "" {
		return 0
	}
	b, err := readFile(filepath.Join(d, "pids.max"))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// OOMKills reports how many processes of the group the kernel's OOM killer
// has killed.
func (g *Group) OOMKills() int {
	if d := g.V1["memory"]; d != "" {
		return fieldOf(filepath.Join(d, "memory.oom_control"), "oom_kill")
	}
	if g.Unified && g.V2 != "" {
		return fieldOf(filepath.Join(g.V2, "memory.events"), "oom_kill")
	}
	return 0
}

func fieldOf(file, key string) int {
	b, err := readFile(file)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// RemoveTree kills anything left in the group and its children, waits
// until no process is left in any of them, and removes them all, deepest
// first: the gc entry point's work, and the cleanup of a pod that failed
// before it started. On cgroup v2, cgroup.kill kills a whole subtree at
// once, forks in flight included; on v1 every listed process is killed
// again until none is listed. It gives up, with an error, after
// RemoveTimeout. It is idempotent.
func (g *Group) RemoveTree() error {
	if err := g.Drain(); err != nil {
		return err
	}
	var errs []error
	for _, d := range g.dirs() {
		subs := subdirs(d)
		for i := len(subs) - 1; i >= 0; i-- {
			if err := (&Group{V2: subs[i]}).Remove(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Drain kills anything left in the group and its children and returns
// once no process is left in any of them, or with an error after
// RemoveTimeout; the directories stay. It is what the run entry point
// does at the pod's end: the pod's emptied cgroups are left for gc to
// remove, as rkt's stage1 leaves its pod's, but nothing of the pod may
// outlive the lock. When nothing is left, as after every orderly end, it
// only reads each directory's process list.
func (g *Group) Drain() error {
	if g.busyDir() == "" {
		return nil
	}
	deadline := time.Now().Add(RemoveTimeout)
	for {
		left := g.killTree()
		if left == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left in %s after %v", left, RemoveTimeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// busyDir returns one directory of the group or its children that lists
// a process, "" when none does.
func (g *Group) busyDir() string {
	for _, d := range g.dirs() {
		for _, s := range subdirs(d) {
			if pids, _ := (&Group{V1: map[string]string{"pids": s}}).Procs(); len(pids) > 0 {
				return s
			}
		}
	}
	return ""
}

// RemoveTimeout bounds how long RemoveTree waits for the group's processes
// to die: SIGKILL is not instant for a process in the middle of a long
// system call or freeing a large memory.
var RemoveTimeout = 30 * time.Second

// killTree sends SIGKILL to everything in the group's directories and
// their children, and returns one directory that still listed a process
// ("" when none did).
func (g *Group) killTree() (left string) {
	for _, d := range g.dirs() {
		if d == g.V2 {
			_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
		}
		for _, s := range subdirs(d) {
			sub := &Group{V1: map[string]string{"pids": s}}
			pids, _ := sub.Procs()
			if len(pids) > 0 && left == "" {
				left = s
			}
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	return left
}

// subdirs lists d and every directory below it, parents first. d may
// name a directory through a link (PID 1's /proc/self/fd/N): the walk
// starts below the trailing slash, which resolves it.
func subdirs(d string) []string {
	var subs []string
	_ = filepath.WalkDir(d+"/", func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			subs = append(subs, filepath.Clean(p))
		}
		return nil
	})
	return subs
}

// Path returns the group's path relative to its hierarchy's root, for the
// pod's subcgroup file (contract §4).
func (g *Group) Path() string {
	v2, v1, err := mounts()
	if err != nil {
		return ""
	}
	if g.V2 != "" && v2 != "" {
		if rel, err := filepath.Rel(v2, g.V2); err == nil {
			return rel
		}
	}
	for _, c := range v1Controllers {
		if d, ok := g.V1[c]; ok && v1[c] != "" {
			if rel, err := filepath.Rel(v1[c], d); err == nil {
				return rel
			}
		}
	}
	return ""
}

// DefaultPodPidsMax is the pod's pids.max when its manifest sets none:
// 15% of the tasks the host can have, as systemd's DefaultTasksMax= gives
// each unit, where the host's maximum is the least of pid_max - 1,
// threads-max and the root cgroup's pids.max. A pod of fork-bombing apps
// then leaves the host most of its pids.
func DefaultPodPidsMax() int {
	limit := int64(1 << 22) // PID_MAX_LIMIT
	read := func(p string) int64 {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0
		}
		return n
	}
	if n := read("/proc/sys/kernel/pid_max"); n > 1 {
		limit = min(limit, n-1)
	}
	if n := read("/proc/sys/kernel/threads-max"); n > 0 {
		limit = min(limit, n)
	}
	if v2, v1, err := mounts(); err == nil {
		for _, d := range []string{v1["pids"], v2} {
			if n := read(filepath.Join(d, "pids.max")); d != "" && n > 0 {
				limit = min(limit, n)
			}
		}
	}
	return int(max(limit*15/100, 1))
}
