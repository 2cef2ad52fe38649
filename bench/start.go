package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/hostside/launch"
)

// peer is one contender of an interleaved measurement. round runs it once
// and records its figures in the row; setup, if set, runs once before the
// first round and may say why the peer cannot run here.
type peer struct {
	name  string
	pod1  bool
	setup func() error
	round func(r *row) error
	// rounds, if set, caps this peer's measured rounds (a slow peer).
	rounds int
}

// interleave runs warm-up rounds and then measured rounds; in each round
// every peer runs once, in an order rotated from round to round so no peer
// always follows the same one.
func (b *bench) interleave(s *section, peers []*peer, rounds, warmup int) {
	var live []*peer
	for _, p := range peers {
		if !b.wantPeer(p.name) {
			continue
		}
		r := s.row(p.name, p.pod1)
		if p.setup != nil {
			if err := p.setup(); err != nil {
				r.note = err.Error()
				b.logf("%s: %s: %v", s.id, p.name, err)
				continue
			}
		}
		live = append(live, p)
	}
	for i := -warmup; i < rounds; i++ {
		for j := range live {
			p := live[(j+max(i, 0))%len(live)]
			if p.rounds > 0 && i >= p.rounds {
				continue
			}
			b.warming = i < 0
			if err := s.row(p.name, p.pod1).record(i < 0, p.round); err != nil {
				b.logf("%s: %s: round %d: %v", s.id, p.name, i, err)
			}
		}
		fmt.Fprint(os.Stderr, ".")
	}
	b.warming = false
	fmt.Fprintln(os.Stderr)
}

// wantPeer says whether the row name is measured (-peers).
func (b *bench) wantPeer(name string) bool {
	if b.peers == "" {
		return true
	}
	for _, w := range strings.Split(b.peers, ",") {
		if w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// measureStart is issue §1: a pod of one app running a true, from the
// start of the runtime to its exit, statuses written.
func (b *bench) measureStart() *section {
	s := newSection("start", "Pod start to exit: one app running `true`", "ms", "median", "CPU")
	s.chart, s.logScale = true, true
	s.desc = "From fork+exec of the runtime to its exit being reaped by the bench, for one app running the same " +
		"129-byte static `true` (exit_group(0)) in every peer. pod1's stage1 alone: a pod directory prepared as " +
		"rkt's stage0 leaves it (contract §5), then exec of `stage1/rootfs/run --net=none UUID` with the pod dir " +
		"flock'd on RKT_LOCK_FD; the app's status file is checked after each run. The run entry point is the C waiter, " +
		"as in the image. pod1 end to end: `pod1 run` " +
		"from an ACI (image store warm, overlays mounted as rkt does; unmounted after, untimed). crun and runc run " +
		"a default `crun spec` bundle on the same rootfs (pid, mount, ipc, uts and network namespaces). " +
		"systemd-nspawn runs the app as its PID 1 with a private network; nspawn + systemd boots the host's " +
		"systemd with journald and one app unit, as rkt's default stage1 does. CPU is the user and system time of the " +
		"runtime's process and of every process reaped within its tree (getrusage at the bench's wait4): a process " +
		"left as an orphan and reaped by the bench is not in it (pod1's lock keeper, about 1-2 ms), nor is the " +
		"kernel threads' work (network namespace clean-up, RCU). On this 2-CPU host a start cannot take less wall time " +
		"than half its CPU."
	trueArgv := []string{"/true"}
	peers := []*peer{
		{name: "pod1 stage1 (prepared pod)", pod1: true, round: func(r *row) error {
			return b.truePodRound(r, trueArgv, podOpts{})
		}},
	}
	for _, d := range b.vs {
		peers = append(peers, &peer{name: "pod1 stage1 (prepared pod), " + d, pod1: true, round: func(r *row) error {
			return b.truePodRound(r, trueArgv, podOpts{repo: d})
		}})
	}
	peers = append(peers,
		b.launcherPeer(),
		&peer{name: "floor: unshare -mpfiu + chroot", setup: b.need("unshare", "chroot"), round: func(r *row) error {
			return b.timed(r, spec{argv: []string{b.tools["unshare"], "-mpfiu", "--mount-proc", "chroot", b.fixture, "/true"}})
		}},
		b.ociPeer("crun", trueArgv),
		b.ociPeer("runc", trueArgv),
		&peer{name: "systemd-nspawn (app as PID 1)", setup: b.need("systemd-nspawn"), round: func(r *row) error {
			return b.timed(r, spec{argv: b.nspawnArgs(b.fixture, "/true")})
		}},
		b.nspawnBootPeer(),
	)
	b.interleave(s, peers, b.rounds, b.warmup)
	for _, r := range s.rows {
		switch {
		case strings.HasPrefix(r.name, "floor") && len(r.m[0].vals) > 0:
			s.targets = append(s.targets, targetLine{2 * r.m[0].median(), "target: 2× the floor"})
		case r.name == "crun" && len(r.m[0].vals) > 0:
			s.targets = append(s.targets, targetLine{r.m[0].median(), "target: crun"})
		}
	}
	return s
}

// need says which of the named tools are missing.
func (b *bench) need(tools ...string) func() error {
	return func() error { return b.notInstalled(tools...) }
}

// debianPackage is the package of each tool the bench looks for.
var debianPackage = map[string]string{
	"crun": "crun", "runc": "runc", "systemd-nspawn": "systemd-container", "tini": "tini",
	"catatonit": "catatonit", "conmon": "conmon", "unshare": "util-linux", "nsenter": "util-linux",
	"chroot": "coreutils", "ip": "iproute2",
}

// notInstalled names the tools of tools missing from this host, with
// their Debian packages, or is nil.
func (b *bench) notInstalled(tools ...string) error {
	var miss []string
	for _, t := range tools {
		if b.tools[t] == "" {
			miss = append(miss, fmt.Sprintf("%s (Debian package %s)", t, debianPackage[t]))
		}
	}
	if len(miss) == 0 {
		return nil
	}
	return fmt.Errorf("not installed here: %s; `sudo make bench` installs the peers", strings.Join(miss, ", "))
}

// timed runs a command to its end and records fork-to-reaped.
func (b *bench) timed(r *row, s spec) error {
	c, err := run(s, 30*time.Second)
	if c != nil {
		defer c.close()
	}
	if err != nil {
		return err
	}
	r.addRun(c)
	return nil
}

func (b *bench) ociPeer(tool string, args []string) *peer {
	var dir string
	return &peer{name: tool, setup: func() error {
		if err := b.notInstalled(tool); err != nil {
			return err
		}
		var err error
		dir, err = b.bundle(tool+"-true", args)
		return err
	}, round: func(r *row) error {
		id := ctrID(tool)
		err := b.timed(r, spec{argv: []string{b.tools[tool], "run", "--bundle", dir, id}})
		if err != nil {
			b.ociForget(tool, id)
		}
		return err
	}}
}

func (b *bench) nspawnBootPeer() *peer {
	var root string
	return &peer{name: "systemd-nspawn + systemd + journald", setup: func() error {
		if err := b.notInstalled("systemd-nspawn"); err != nil {
			return err
		}
		var err error
		root, err = b.sdTree("true", []string{"/true"}, "")
		return err
	}, round: func(r *row) error {
		return b.timed(r, spec{argv: b.nspawnArgs(root, "--bind-ro=/usr", "--boot")})
	}}
}

// launcherPeer is `pod1 run` end to end from an ACI holding the true.
func (b *bench) launcherPeer() *peer {
	dir := filepath.Join(b.work, "rktdir")
	var aci string
	return &peer{name: "pod1 run (launcher, end to end)", pod1: true, setup: func() error {
		var err error
		aci, err = b.trueACI()
		return err
	}, round: func(r *row) error {
		argv := []string{b.pod1Bin, "--dir=" + dir, "--insecure-options=image", "run",
			"--stage1-path=" + filepath.Join(b.repo, "build/stage1.aci"), "--net=none", aci}
		c, err := run(spec{argv: argv}, 30*time.Second)
		if c != nil {
			defer c.close()
		}
		// rkt leaves the overlays mounted and the cgroups until gc:
		// remove the cgroups, unmount the overlays, deepest first,
		// and drop the pod (untimed).
		var cerr error
		pds, _ := filepath.Glob(filepath.Join(dir, "pods", "run", "*"))
		for _, pd := range pds {
			cerr = errors.Join(cerr, cgroups.RemovePod(pd, filepath.Base(pd)))
		}
		uerr := errors.Join(cerr, launch.UnmountAll(filepath.Join(dir, "pods")))
		rerr := os.RemoveAll(filepath.Join(dir, "pods"))
		if err != nil {
			return err
		}
		if uerr != nil || rerr != nil {
			return fmt.Errorf("cleanup: %w", errors.Join(uerr, rerr))
		}
		r.addRun(c)
		return nil
	}}
}

// trueACI writes an ACI whose app is the tiny true.
func (b *bench) trueACI() (string, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte, dir bool) error {
		h := &tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []error{
		add("manifest", 0o644, imageManifestJSON, false),
		add("rootfs/", 0o755, nil, true),
		add("rootfs/etc/", 0o755, nil, true),
		add("rootfs/tmp/", 0o1777, nil, true),
		add("rootfs/true", 0o755, tinyELF(codeTrue), false),
		add("rootfs/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"), false),
		add("rootfs/etc/group", 0o644, []byte("root:x:0:\n"), false),
		tw.Close(),
	}
	for _, err := range steps {
		if err != nil {
			return "", err
		}
	}
	path := filepath.Join(b.work, "bench-true.aci")
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// truePodRound is one round of a start row of pod1's stage1: a prepared
// pod whose one app runs argv, from the run entry point's exec to its
// exit (the pod's gc is outside the timing).
func (b *bench) truePodRound(r *row, argv []string, o podOpts) error {
	p, err := b.newPodOpts([]podApp{{name: "app", exec: argv}}, o)
	if err != nil {
		return err
	}
	c, err := b.runPodToEnd(p, 20*time.Second)
	if err != nil {
		return err
	}
	defer c.close()
	r.addRun(c)
	return b.finishPod(p)
}
