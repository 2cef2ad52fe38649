package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// What the bench changes on the host for the run, and puts back: its own
// cgroup, the v1 binding crun needs on a hybrid layout, a tmpfs for
// systemd-nspawn's runtime state; and the cost of a cgroup move, which
// says which of two kernels' paths the run had.

// The bench moves itself into a cgroup of its own in the v2 tree and in
// the name=systemd tree, so what the peers create below their own cgroup
// (systemd-nspawn --keep-unit makes payload/ and supervisor/ there, and
// does not remove them) is removed with it at the end, and nothing of
// ours is mixed with the host's.
func (b *bench) enterCgroup() error {
	cur, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	mounts := map[string]string{} // hierarchy key -> mount point
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		i := indexOf(fl, "-")
		if i < 0 || i+3 >= len(fl) {
			continue
		}
		switch {
		case fl[i+1] == "cgroup2":
			mounts[""] = fl[4]
		case fl[i+1] == "cgroup" && strings.Contains(fl[i+3], "name=systemd"):
			mounts["name=systemd"] = fl[4]
		}
	}
	f.Close()
	for _, line := range strings.Split(strings.TrimSpace(string(cur)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		mnt, ok := mounts[parts[1]]
		if !ok {
			continue
		}
		orig := filepath.Join(mnt, parts[2])
		dir := filepath.Join(orig, fmt.Sprintf("pod1-bench-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			_ = os.Remove(dir)
			return err
		}
		b.atExit(func() error {
			if err := os.WriteFile(filepath.Join(orig, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
				return fmt.Errorf("leave %s: %w", dir, err)
			}
			return removeCgroupTree(dir)
		})
	}
	return nil
}

// removeCgroupTree removes a cgroup and everything below it, deepest
// first; a group that still has processes cannot go and is reported.
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		var err error
		for try := 0; try < 50; try++ {
			if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// ensureHybridForCrun makes a hybrid cgroup layout one crun 1.8 accepts:
// it refuses any controller left on the cgroup2 tree of a hybrid layout
// ("cgroups in hybrid mode not supported, drop all controllers from
// cgroupv2"), and on this kind of machine hugetlb is the one left there.
// Each such controller is bound to a v1 hierarchy of its own for the run
// and unbound after, which gives it back to cgroup2. The kernel binds a
// controller to v1 only while cgroup2 does not use it (EBUSY otherwise):
// one enabled in the cgroup2 root's subtree_control is first disabled
// there, if no cgroup below uses it (a limit, a charge, or passing it on),
// and enabled again at the end.
func (b *bench) ensureHybridForCrun() {
	if b.tools["crun"] == "" {
		return
	}
	mi := readFile("/proc/self/mountinfo")
	if !strings.Contains(mi, " - cgroup2 ") || !strings.Contains(mi, " - cgroup ") {
		return // pure v1 or pure v2: crun copes
	}
	var v2 string
	for _, l := range strings.Split(mi, "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.Contains(l, " - cgroup2 ") {
			v2 = f[4]
		}
	}
	ctrls := strings.Fields(readFile(filepath.Join(v2, "cgroup.controllers")))
	// A controller may also be bound to a v1 hierarchy that no mount here
	// shows: one a container of an earlier run still holds in its own
	// mount namespace (systemd-nspawn's systemd mounts what it finds).
	// When that namespace ends, the controller goes back to cgroup2 in
	// the middle of this run, and crun refuses every round after. A mount
	// of the same controller joins that hierarchy and keeps it for the run.
	ctrls = append(ctrls, unmountedV1(mi)...)
	for _, ctrl := range ctrls {
		note := ""
		if containsWord(readFile(filepath.Join(v2, "cgroup.subtree_control")), ctrl) {
			if user := cgroup2User(v2, ctrl); user != "" {
				b.logf("crun: %s is in use on cgroup2 (%s): left alone, crun cannot run here", ctrl, user)
				b.setupNotes = append(b.setupNotes, fmt.Sprintf("crun 1.8 refuses a hybrid cgroup layout while a controller is left on cgroup2; "+
					"%s is, and is in use there (%s), so the bench left it: crun's rows fail.", ctrl, user))
				continue
			}
			if err := writeControl(v2, "-"+ctrl); err != nil {
				b.logf("crun: disable %s in %s: %v", ctrl, v2, err)
				continue
			}
			b.atExit(func() error { return writeControl(v2, "+"+ctrl) })
			note = fmt.Sprintf(" It was enabled in %s/cgroup.subtree_control (for the cgroups below, none of which used it): the bench "+
				"disabled it there first, and enabled it again after.", v2)
		}
		dir := filepath.Join("/sys/fs/cgroup", ctrl)
		made, err := mkdirMade(dir)
		if err != nil {
			b.logf("crun: %s: %v", ctrl, err)
			continue
		}
		// A controller just disabled on cgroup2 is freed when its
		// cgroups' states go offline, which the kernel does after an
		// RCU grace period: EBUSY until then.
		for try := 0; ; try++ {
			err = unix.Mount("cgroup", dir, "cgroup", 0, ctrl)
			if !errors.Is(err, unix.EBUSY) || try == 100 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			b.logf("crun: bind %s to v1: %v", ctrl, err)
			if made {
				_ = os.Remove(dir)
			}
			continue
		}
		b.setupNotes = append(b.setupNotes, fmt.Sprintf("crun 1.8 refuses a hybrid cgroup layout while a controller is left on cgroup2 "+
			"(\"cgroups in hybrid mode not supported\"); %s was: the bench mounted `cgroup -o %s` on %s for the run and unmounted it after.%s",
			ctrl, ctrl, dir, note))
		b.atExit(func() error {
			var err error
			for try := 0; try < 50; try++ {
				if err = unix.Unmount(dir, 0); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
			if made {
				return os.Remove(dir)
			}
			return nil
		})
	}
}

// unmountedV1 lists the controllers /proc/cgroups shows bound to a v1
// hierarchy (a hierarchy ID other than 0) and enabled, that no cgroup
// mount in mountinfo mi carries.
func unmountedV1(mi string) []string {
	var out []string
	for _, l := range strings.Split(readFile("/proc/cgroups"), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || strings.HasPrefix(f[0], "#") || f[1] == "0" || f[3] != "1" {
			continue
		}
		mounted := false
		for _, m := range strings.Split(mi, "\n") {
			if _, opts, ok := strings.Cut(m, " - cgroup "); ok && slices.Contains(strings.Split(lastField(opts), ","), f[0]) {
				mounted = true
				break
			}
		}
		if !mounted {
			out = append(out, f[0])
		}
	}
	return out
}

// lastField is the last space-separated field of s.
func lastField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// writeControl writes one "+ctrl" or "-ctrl" to a cgroup2 directory's
// subtree_control. A controller just unbound from v1 comes back to
// cgroup2 once its v1 hierarchy is gone, asynchronously: retried a while.
func writeControl(dir, op string) error {
	var err error
	for try := 0; try < 100; try++ {
		if err = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(op), 0); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s in %s/cgroup.subtree_control: %w", op, dir, err)
}

// cgroup2User names a cgroup below root that uses ctrl, or "" if none
// does: one that passes it on (its subtree_control), sets a limit of it
// (a ctrl.*max file not at its maximum) or is charged (a non-zero
// ctrl.*current).
func cgroup2User(root, ctrl string) string {
	user := ""
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || user != "" {
			return filepath.SkipDir
		}
		if d.IsDir() || p == filepath.Join(root, d.Name()) {
			return nil // the root's own files
		}
		name := d.Name()
		v := strings.TrimSpace(readFile(p))
		switch {
		case name == "cgroup.subtree_control" && containsWord(v, ctrl):
			user = p + ": " + v
		case strings.HasPrefix(name, ctrl+".") && strings.HasSuffix(name, ".max") && !unlimited(v):
			user = p + ": " + v
		case strings.HasPrefix(name, ctrl+".") && strings.HasSuffix(name, ".current") && v != "0" && v != "":
			user = p + ": " + v
		}
		return nil
	})
	return user
}

// unlimited says whether a cgroup limit reads as none: "max", or a number
// at the page counter's maximum (about 2^63 bytes), which is how the
// kernel shows "max" written to a hugetlb limit.
func unlimited(v string) bool {
	if v == "max" {
		return true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return err == nil && n >= 1<<62
}

func containsWord(s, w string) bool { return indexOf(strings.Fields(s), w) >= 0 }

// mkdirMade creates dir if missing and says whether it did.
func mkdirMade(dir string) (bool, error) {
	if _, err := os.Stat(dir); err == nil {
		return false, nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return false, err
	}
	return true, nil
}

// ensureNspawnRun gives systemd-nspawn a tmpfs for its runtime state when
// /run is not one (no systemd on this host): nspawn refuses to remove
// directories on a disk file system and would leave
// /run/systemd/nspawn/propagate/<machine> behind after every run.
func (b *bench) ensureNspawnRun() {
	if b.tools["systemd-nspawn"] == "" {
		return
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/run", &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		return
	}
	dir := "/run/systemd/nspawn"
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		return
	}
	var made []string
	for _, d := range []string{"/run/systemd", dir} {
		m, err := mkdirMade(d)
		if err != nil {
			b.logf("nspawn tmpfs: %v", err)
			return
		}
		if m {
			made = append(made, d)
		}
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		b.logf("nspawn tmpfs: %v", err)
		return
	}
	b.setupNotes = append(b.setupNotes, "/run is not a tmpfs on this host (no systemd): systemd-nspawn's runtime directory /run/systemd/nspawn got a tmpfs for the run (unmounted after), as on a systemd host.")
	b.atExit(func() error {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return err
		}
		for i := len(made) - 1; i >= 0; i-- {
			if err := os.Remove(made[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// cgroupMoveCost times moving one process into a fresh cgroup (a write to
// cgroup.procs), the way every runtime here places its processes. On most
// kernels the first such write after a quiet spell waits for an RCU grace
// period (cgroup_threadgroup_rwsem), several milliseconds on a small VM,
// unless the cgroup2 hierarchy was ever mounted with favordynmods, after
// which (Linux 6.17+) the kernel uses a per-thread-group lock until reboot.
// It is reported so the reader knows which of the two machines this was.
func (b *bench) cgroupMoveCost() string {
	base := ""
	for _, d := range cgroupsNamed(fmt.Sprintf("pod1-bench-%d", os.Getpid())) {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil && strings.HasPrefix(d, "/sys/fs/cgroup/unified") {
			base = d
		}
	}
	if base == "" {
		return ""
	}
	dir := filepath.Join(base, "move-probe")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	defer func() { _ = removeCgroupTree(dir) }()
	var m metric
	for i := 0; i < 5; i++ {
		c, err := start(spec{argv: []string{filepath.Join(b.fixture, "probe"), "sleep", "5s"}, noOut: true})
		if err != nil {
			return ""
		}
		time.Sleep(150 * time.Millisecond)
		t := time.Now()
		err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(c.pid)), 0)
		d := time.Since(t)
		c.kill()
		_ = c.wait(5 * time.Second)
		if err != nil {
			return ""
		}
		m.add(ms(d))
	}
	// The kernel does not say which lock it uses (dmesg says it once, and
	// its ring buffer rotates): the cost itself tells.
	mode := "the fast path (the kernel's per-thread-group lock, in use once favordynmods has been set on the cgroup2 mount " +
		"since boot)"
	if m.median() >= 2 {
		mode = "the slow path (the writer of the global cgroup_threadgroup_rwsem waits for an RCU grace period)"
	}
	return fmt.Sprintf("Moving a process into a cgroup (one write to cgroup.procs after 150 ms of quiet) took %s ms median (%s–%s) on this kernel: "+
		"%s. Every runtime here pays it at least once per start ([design-start.md](design-start.md) says how pod1 keeps it off its own start path).",
		num(m.median()), num(m.min()), num(m.max()), mode)
}
