package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/network/netinfo"
)

// measureNet is the price of networking: a pod of one app running `true`
// with --net=default against --net=none, each run to exit and then
// collected by the gc entry point (where the network's DEL runs), and the
// floor for that price: the CNI plugin chain of the same network
// (ptp with host-local and IP masquerade, the stage1's 99-default.conf)
// run by itself, ADD then DEL on a namespace made beforehand.
func (b *bench) measureNet() *section {
	s := newSection("net", "Networking: pod start to exit, then gc, with --net=default", "ms", "start to exit", "start to exit + gc")
	s.ratioCol = 1
	s.desc = "pod1's stage1 alone on a prepared pod (as in the start measurement) whose stage1 rootfs holds the " +
		"image's network configurations and CNI plugins: `run --net=none` and `run --net=default` to exit, then " +
		"the `gc` entry point (which, for `default`, runs the plugins' DEL and removes the namespace's mount). " +
		"The floor runs the same plugins directly, with rkt's environment, on a network namespace made untimed " +
		"with `ip netns add`: ptp's ADD (which runs host-local and adds the masquerade rules) in the first " +
		"column, plus its DEL in the second. The target compares what `default` adds to `none`, run + gc, with " +
		"the floor's ADD + DEL."
	plugins := filepath.Join(b.repo, "build/stage1/rootfs", layout.NetPluginDirIn)
	confs := filepath.Join(b.repo, "build/stage1/rootfs", layout.NetConfDirIn)
	conf := filepath.Join(confs, "99-default.conf")
	const noneRow, defaultRow, floorRow = "pod1 stage1 --net=none", "pod1 stage1 --net=default", "floor: ptp + host-local + ipmasq, ADD then DEL"
	var uuids []string
	podPeer := func(name, net string) *peer {
		return &peer{name: name, pod1: true, round: func(r *row) error {
			p, err := b.newPod([]podApp{{name: "app", exec: []string{"/true"}}})
			if err != nil {
				return err
			}
			uuids = append(uuids, p.uuid)
			s1 := filepath.Join(p.dir, layout.Stage1RootFS)
			for src, dst := range map[string]string{plugins: layout.NetPluginDirIn, confs: layout.NetConfDirIn} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(s1, dst)), 0o755); err != nil {
					return err
				}
				if err := os.Symlink(src, filepath.Join(s1, dst)); err != nil {
					return err
				}
			}
			c, err := b.runPodToEndNet(p, "--net="+net, 30*time.Second)
			if err != nil {
				if gc, _ := b.gcPod(p); gc != nil { // what a failed setup left
					gc.close()
				}
				return err
			}
			defer c.close()
			gc, err := b.gcPod(p)
			if gc != nil {
				defer gc.close()
			}
			if err != nil {
				return err
			}
			r.m[0].add(ms(c.elapsed()))
			r.m[1].add(ms(c.elapsed() + gc.elapsed()))
			return b.finishPod(p)
		}}
	}
	var n int
	floor := &peer{name: floorRow, setup: func() error {
		if b.tools["ip"] == "" {
			return b.notInstalled("ip")
		}
		_, err := os.Stat(conf)
		return err
	}, round: func(r *row) error {
		n++
		ns := fmt.Sprintf("pod1-bench-%d-%d", os.Getpid(), n)
		if _, err := quiet(10*time.Second, b.tools["ip"], "netns", "add", ns); err != nil {
			return err
		}
		defer func() { _, _ = quiet(10*time.Second, b.tools["ip"], "netns", "del", ns) }()
		id, err := newUUID()
		if err != nil {
			return err
		}
		uuids = append(uuids, id)
		plugin := func(cmd string) (time.Duration, error) {
			in, err := os.Open(conf)
			if err != nil {
				return 0, err
			}
			defer in.Close()
			c, err := run(spec{
				argv:  []string{filepath.Join(plugins, "ptp")},
				stdin: in,
				env: append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+id, "CNI_NETNS=/var/run/netns/"+ns,
					"CNI_IFNAME=eth0", "CNI_PATH="+plugins, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"),
				sys: &syscall.SysProcAttr{},
			}, 30*time.Second)
			if c != nil {
				defer c.close()
			}
			if err != nil {
				return 0, fmt.Errorf("ptp %s: %w", cmd, err)
			}
			return c.elapsed(), nil
		}
		add, err := plugin("ADD")
		if err != nil {
			_, _ = plugin("DEL")
			return err
		}
		del, err := plugin("DEL")
		if err != nil {
			return err
		}
		r.m[0].add(ms(add))
		r.m[1].add(ms(add + del))
		return nil
	}}
	s.base = noneRow
	b.interleave(s, []*peer{podPeer(noneRow, "none"), podPeer(defaultRow, "default"), floor}, b.rounds, b.warmup)
	if left := netLeftovers(uuids); len(left) > 0 {
		b.leftovers = append(b.leftovers, left...)
	}
	none, def, fl := s.row(noneRow, true), s.row(defaultRow, true), s.row(floorRow, false)
	if len(none.m[1].vals) > 0 && len(fl.m[1].vals) > 0 {
		s.targets = append(s.targets, targetLine{none.m[1].median() + 1.5*fl.m[1].median(), "target: none + 1.5× the plugins"})
	}
	def.vs = none.name
	return s
}

// runPodToEndNet is runPodToEnd with the given --net argument.
func (b *bench) runPodToEndNet(p *pod, net string, timeout time.Duration) (*child, error) {
	c, err := b.startPodNet(p, net)
	if err != nil {
		return nil, err
	}
	if err := c.wait(timeout); err != nil {
		c.close()
		return nil, err
	}
	// A pod that ended badly is still collected: its cgroups would
	// otherwise outlive the bench.
	if c.code() != 0 {
		err := fmt.Errorf("exit %d: %s", c.code(), c.output(600))
		c.close()
		_ = b.finishPod(p)
		return nil, err
	}
	if err := p.checkStatuses(0); err != nil {
		c.close()
		_ = b.finishPod(p)
		return nil, err
	}
	return c, nil
}

// gcPod runs the pod's gc entry point as rkt gc does.
func (b *bench) gcPod(p *pod) (*child, error) {
	return run(spec{
		argv: []string{filepath.Join(p.dir, layout.Stage1RootFS, "gc"), p.uuid},
		dir:  p.dir,
		sys:  &syscall.SysProcAttr{},
	}, 60*time.Second)
}

// netLeftovers lists what of the pods' and the floor's networking is
// left: namespace mounts, leases, iptables rules naming them.
func netLeftovers(uuids []string) []string {
	var left []string
	rules, _ := quiet(10*time.Second, "iptables-save")
	leases := map[string]bool{}
	_ = filepath.WalkDir("/var/lib/cni/networks/default", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(path); err == nil {
				leases[strings.SplitN(string(b), "\n", 2)[0]] = true
			}
		}
		return nil
	})
	for _, u := range uuids {
		if _, err := os.Lstat(netinfo.NetnsPath(u)); err == nil {
			left = append(left, netinfo.NetnsPath(u))
		}
		if strings.Contains(rules, u) {
			left = append(left, "iptables rules of "+u)
		}
		if leases[u] {
			left = append(left, "a lease of "+u)
		}
	}
	return left
}
