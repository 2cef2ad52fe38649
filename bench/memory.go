package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// rollup is RSS and PSS of one process, in KiB, from smaps_rollup.
func rollup(pid int) (rss, pss int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "Rss:":
			rss = n
		case "Pss:":
			pss = n
		}
	}
	return rss, pss, nil
}

// sumMemory records the summed RSS and PSS (MiB) of pids.
func sumMemory(r *row, pids []int) (string, error) {
	var rss, pss int
	var parts []string
	for _, p := range pids {
		a, b, err := rollup(p)
		if err != nil {
			return "", fmt.Errorf("pid %d: %w", p, err)
		}
		rss += a
		pss += b
		parts = append(parts, fmt.Sprintf("%s %.2f/%.2f", argv0(p), float64(a)/1024, float64(b)/1024))
	}
	r.m[0].add(float64(rss) / 1024)
	r.m[1].add(float64(pss) / 1024)
	return strings.Join(parts, ", "), nil
}

// without lists the processes of pids except app and everything below it.
func without(pids []int, app int) []int {
	skip := map[int]bool{app: true}
	for _, d := range descendants(app) {
		skip[d] = true
	}
	var out []int
	for _, p := range pids {
		if !skip[p] {
			out = append(out, p)
		}
	}
	return out
}

// settle is how long a runtime is left alone, its app running, before its
// memory is read: start-up garbage is collected or not by then.
const settle = 500 * time.Millisecond

// measureMemory is issue §2: RSS and PSS summed over the runtime's own
// processes while one app sleeps.
func (b *bench) measureMemory() *section {
	s := newSection("memory", "Memory of the runtime while one app sleeps", "MiB", "RSS", "PSS")
	s.chart = true
	s.targets = []targetLine{{4, "target: 4 MiB RSS (issue 7)"}, {3, "target: 3 MiB RSS (issue 16)"}}
	s.desc = "RSS and PSS (from /proc/PID/smaps_rollup) summed over the runtime's own resident processes, the app " +
		"(the static probe sleeping) and its children excluded, read " + settle.String() + " after the app started. " +
		"pod1: the run process (which holds the lock and waits), the pod's PID 1, pod1-pause (the apps' pid namespace's init) and the lock keeper. nspawn + systemd: nspawn, the " +
		"container's systemd, journald and whatever else the boot left running. crun: the `crun run` process that " +
		"stays as the container's parent. conmon: the conmon monitor alone (crun exits after create and start). " +
		"tini and catatonit: the PID 1 process alone, started by `unshare -pf --mount-proc` (unshare not counted)."
	sleepArgv := []string{"/probe", "sleep", "60s"}
	details := map[string]string{}
	b.memDetail = details
	rec := func(name string, r *row, pids []int) error {
		d, err := sumMemory(r, pids)
		if err == nil {
			details[name] = d
		}
		return err
	}
	peers := []*peer{
		{name: "pod1 stage1", pod1: true, round: func(r *row) error {
			return b.pod1MemRound(r, sleepArgv, podOpts{}, settle, func(r *row, pids []int) error { return rec("pod1 stage1", r, pids) })
		}},
		b.memPeer("systemd-nspawn + systemd + journald", func() (spec, error) {
			root, err := b.sdTree("mem", sleepArgv, "")
			return spec{argv: b.nspawnArgs(root, "--bind-ro=/usr", "--boot")}, err
		}, "systemd-nspawn", rec),
		b.memPeer("systemd-nspawn (app as PID 1)", func() (spec, error) {
			return spec{argv: b.nspawnArgs(b.fixture, append([]string{"--kill-signal=SIGTERM"}, sleepArgv...)...)}, nil
		}, "systemd-nspawn", rec),
		b.memPeer("crun", func() (spec, error) {
			dir, err := b.bundle("crun-sleep", sleepArgv)
			return spec{argv: []string{b.tools["crun"], "run", "--bundle", dir, ctrID("crun")}}, err
		}, "crun", rec),
		b.conmonPeer(sleepArgv, rec),
		b.pid1MemPeer("tini", rec),
		b.pid1MemPeer("catatonit", rec),
	}
	b.interleave(s, peers, 3, 1)
	for _, r := range s.rows {
		if d := details[r.name]; d != "" {
			s.note("%s, last round, per process (RSS/PSS MiB): %s.", r.name, d)
		}
	}
	return s
}

// pod1MemRound starts a pod of one app running argv with the settings o,
// and records (rec) the memory of the stage1's processes once the app has
// run for settle (the memory measurement's: settle): the run entry point and its children, PID 1 and the
// lock keeper, and PID 1's pod1-pause.
func (b *bench) pod1MemRound(r *row, argv []string, o podOpts, settle time.Duration, rec func(*row, []int) error) error {
	p, c, err := b.newStartedPodOpts([]podApp{{name: "app", exec: argv}}, o)
	if err != nil {
		return err
	}
	defer c.close()
	defer func() {
		if err := b.finishPod(p); err != nil {
			b.logf("memory: %v", err)
		}
	}()
	defer stopChild(c, unix.SIGTERM)
	_, err = p.pid1(10 * time.Second)
	if err != nil {
		return err
	}
	if _, err := findProbe(c, c.pid, 10*time.Second); err != nil {
		return err
	}
	time.Sleep(settle)
	procs := append([]int{c.pid}, children(c.pid)...)
	for _, p := range children(c.pid) {
		for _, q := range children(p) {
			if argv0(q) == "pod1-pause" {
				procs = append(procs, q)
			}
		}
	}
	return rec(r, procs)
}

// stopChild ends a runtime: sig, then SIGKILL to its group if it is not
// gone within 10 s.
func stopChild(c *child, sig unix.Signal) {
	if c.exited() {
		return
	}
	_ = unix.Kill(c.pid, sig)
	_ = c.wait(10 * time.Second)
}

// memPeer runs a runtime whose processes are it and its descendants.
func (b *bench) memPeer(name string, mk func() (spec, error), tool string, rec func(string, *row, []int) error) *peer {
	var sp spec
	return &peer{name: name, setup: func() error {
		if err := b.notInstalled(tool); err != nil {
			return err
		}
		var err error
		sp, err = mk()
		return err
	}, round: func(r *row) error {
		s := sp
		if tool == "crun" {
			// A fresh container name each round.
			s.argv = append(append([]string{}, sp.argv[:len(sp.argv)-1]...), ctrID("crun"))
		}
		c, err := start(s)
		if err != nil {
			return err
		}
		defer c.close()
		defer stopChild(c, unix.SIGTERM)
		app, err := findProbe(c, c.pid, 20*time.Second)
		if err != nil {
			return fmt.Errorf("%w: %s", err, c.output(300))
		}
		time.Sleep(settle)
		return rec(name, r, without(append([]int{c.pid}, descendants(c.pid)...), app))
	}}
}

// pid1MemPeer runs tini or catatonit as PID 1 of a new pid namespace.
func (b *bench) pid1MemPeer(tool string, rec func(string, *row, []int) error) *peer {
	return &peer{name: tool, setup: b.need(tool, "unshare"), round: func(r *row) error {
		c, err := start(spec{argv: []string{b.tools["unshare"], "-pf", "--mount-proc", b.tools[tool], "--",
			filepath.Join(b.fixture, "probe"), "sleep", "60s"}})
		if err != nil {
			return err
		}
		defer c.close()
		var init int
		if err := waitUntil(10*time.Second, time.Millisecond, tool+" to start", func() bool {
			for _, p := range children(c.pid) {
				if comm(p) == tool {
					init = p
					return true
				}
			}
			return false
		}); err != nil {
			return err
		}
		// SIGKILL to a namespace's PID 1 from outside ends the namespace.
		defer func() {
			_ = unix.Kill(init, unix.SIGKILL)
			_ = c.wait(10 * time.Second)
		}()
		if _, err := findProbe(nil, init, 10*time.Second); err != nil {
			return err
		}
		time.Sleep(settle)
		return rec(tool, r, []int{init})
	}}
}

// conmonPeer runs conmon monitoring a crun container, as podman does.
func (b *bench) conmonPeer(argv []string, rec func(string, *row, []int) error) *peer {
	name := "conmon (+ crun)"
	var dir string
	return &peer{name: name, setup: func() error {
		if err := b.notInstalled("conmon", "crun"); err != nil {
			return err
		}
		var err error
		dir, err = b.bundle("conmon-sleep", argv)
		return err
	}, round: func(r *row) error {
		id := ctrID("conmon")
		state := filepath.Join(b.work, "conmon", id)
		if err := os.MkdirAll(filepath.Join(state, "exits"), 0o755); err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(state) }()
		defer b.ociForget("crun", id)
		pidfile := filepath.Join(state, "conmon.pid")
		// conmon forks its monitor (re-parented to us, the subreaper)
		// and the first process returns.
		_, err := run(spec{argv: []string{b.tools["conmon"], "--api-version", "1", "-c", id, "-u", id, "-n", id,
			"-r", b.tools["crun"], "-b", dir, "-p", filepath.Join(state, "ctr.pid"),
			"-l", "k8s-file:" + filepath.Join(state, "ctr.log"), "--exit-dir", filepath.Join(state, "exits"),
			"--socket-dir-path", state, "--conmon-pidfile", pidfile}}, 20*time.Second)
		if err != nil {
			return err
		}
		var mon int
		exitFile := filepath.Join(state, "exits", id)
		if err := waitUntil(10*time.Second, time.Millisecond, "conmon's pid file and the container", func() bool {
			if _, err := os.Stat(exitFile); err == nil {
				return true // the container failed; conmon says so below
			}
			bs, err := os.ReadFile(pidfile)
			if err != nil {
				return false
			}
			mon, _ = strconv.Atoi(strings.TrimSpace(string(bs)))
			_, err = os.Stat(filepath.Join(state, "ctr.pid"))
			return mon > 0 && err == nil
		}); err != nil {
			return err
		}
		if _, err := os.Stat(exitFile); err == nil {
			log, _ := os.ReadFile(filepath.Join(state, "ctr.log"))
			return fmt.Errorf("the container failed under conmon: %s", strings.TrimSpace(string(log)))
		}
		defer func() {
			_, _ = quiet(10*time.Second, b.tools["crun"], "kill", id, "KILL")
			_ = waitUntil(10*time.Second, time.Millisecond, "conmon to exit", func() bool {
				st := procState(mon)
				return st == "" || st == "Z"
			})
		}()
		if _, err := quiet(10*time.Second, b.tools["crun"], "start", id); err != nil {
			return err
		}
		if _, err := findProbe(nil, mon, 10*time.Second); err != nil {
			return err
		}
		time.Sleep(settle)
		return rec(name, r, []int{mon})
	}}
}

// argv0 names a process by the base of its argv[0] (pod1's PID 1 is
// /proc/self/exe run as "pod1-init", which comm shows as "exe").
func argv0(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return comm(pid)
	}
	return filepath.Base(strings.SplitN(string(b), "\x00", 2)[0])
}
