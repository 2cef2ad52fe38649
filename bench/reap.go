package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pod1/pod1/podspec"
)

// measureReap is issue §3: an app leaves n orphans to the pod's PID 1, all
// released at once; how long after the last one's exit the pod has no
// zombie left (see helper.go for how that is timed from inside the pod).
func (b *bench) measureReap(n int) []*section {
	timed := b.reapSection(n, "timed", "Reaping: %d orphans exiting at the pace they were started",
		"The app (the bench binary as a helper) has a short-lived child start %d orphans one after the other (a "+
			"tiny static executable that lives one second from its own start) and exit, so all of them are "+
			"re-parented to the pod's PID 1 and exit at the pace they were started, as a double-forking app's "+
			"children do. ")
	burst := b.reapSection(n, "burst", "Reaping: %d orphans released at once",
		"The same %d orphans, but each blocks reading a pipe until the helper closes it (release): they all exit "+
			"at once, and the reaper works through a backlog; this measures its throughput more than its latency. ")
	return []*section{timed, burst}
}

func (b *bench) reapSection(n int, mode, title, desc string) *section {
	cols := []string{"last exit → zero zombies", "start → zero zombies", "start → last exit"}
	if mode == "burst" {
		cols = []string{"last exit → zero zombies", "release → zero zombies", "release → last exit"}
	}
	s := newSection("reap-"+mode, fmt.Sprintf(title, n), "ms", cols...)
	s.chart, s.logScale = true, true
	if mode == "timed" {
		s.targets = []targetLine{{1, "target: 1 ms"}}
	}
	s.desc = fmt.Sprintf(desc, n) + "Each orphan writes its CLOCK_MONOTONIC time to a pipe as its last act " +
		"before exit_group, so the largest time read is the last exit; after EOF on that pipe (every orphan past " +
		"exit) the helper lists the pod's /proc, yielding its CPU between listings, until only PID 1 and itself are " +
		"left (zero zombies). \"last exit → " +
		"zero zombies\" is therefore an upper bound that includes the helper's own wake-up and one /proc listing. " +
		"tini and catatonit run as PID 1 of `unshare -pf --mount-proc`. Warm-up rounds use a tenth of the orphans. " +
		fmt.Sprintf("pod1's pod gets `%s` and its app `%s` of %d, above the orphans (the pod's default is 15%% of the host's "+
			"pid_max). ", podspec.AnnPodPidsMax, podspec.AnnPidsMax, n+1000) +
		"The host's kernel.pid_max must leave room for them: the row fails with EAGAIN otherwise."
	orphan := map[string]string{"burst": "orphan", "timed": "orphan-timed"}[mode]
	helper := func(root string) []string {
		k := n
		if b.warming {
			k = max(n/10, 1)
		}
		return []string{filepath.Join(root, "bench"), "helper", "reap", strconv.Itoa(k), filepath.Join(root, orphan), mode}
	}
	record := func(r *row, out string) error {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) == 6 && strings.HasSuffix(f[0], "]:") {
				// pod1's console prefix, "<app>[<pid>]:".
				f = f[1:]
			}
			if len(f) != 5 || f[0] != "reap" {
				continue
			}
			var v [4]int64
			for i := range v {
				x, err := strconv.ParseInt(f[i+1], 10, 64)
				if err != nil {
					return fmt.Errorf("bad line %q", l)
				}
				v[i] = x
			}
			if want := map[bool]int{false: n, true: max(n/10, 1)}[b.warming]; int(v[0]) != want {
				return fmt.Errorf("helper reaped %d orphans, want %d", v[0], want)
			}
			release, last, zero := v[1], v[2], v[3]
			r.m[0].add(float64(zero-last) / 1e6)
			r.m[1].add(float64(zero-release) / 1e6)
			r.m[2].add(float64(last-release) / 1e6)
			return nil
		}
		return fmt.Errorf("no result line in the output: %s", out)
	}
	// The app's and the pod's pids.max both above the orphans: the pod's
	// default is 15% of the host's pid_max (systemd's DefaultTasksMax),
	// which is below 20000 where pid_max is 32768.
	pidsMax := strconv.Itoa(n + 1000)
	peers := []*peer{
		{name: "pod1 stage1", pod1: true, round: func(r *row) error {
			p, err := b.newPodOpts([]podApp{{name: "app", exec: helper("/"),
				ann: map[string]string{podspec.AnnPidsMax: pidsMax}}},
				podOpts{ann: map[string]string{podspec.AnnPodPidsMax: pidsMax}})
			if err != nil {
				return err
			}
			c, err := b.runPodToEnd(p, 120*time.Second)
			if err != nil {
				return err
			}
			defer c.close()
			if err := record(r, c.output(1<<16)); err != nil {
				return err
			}
			return b.finishPod(p)
		}},
	}
	for _, tool := range []string{"tini", "catatonit"} {
		peers = append(peers, &peer{name: tool, setup: b.need(tool, "unshare"), round: func(r *row) error {
			argv := append([]string{b.tools["unshare"], "-pf", "--mount-proc", b.tools[tool], "--"}, helper(b.fixture)...)
			c, err := run(spec{argv: argv}, 120*time.Second)
			if c != nil {
				defer c.close()
			}
			if err != nil {
				return err
			}
			return record(r, c.output(1<<16))
		}})
	}
	// Each round spawns n processes (about 7 s for 20000 here): three
	// rounds for the latency, two for the burst's throughput.
	rounds := map[string]int{"timed": 3, "burst": 2}[mode]
	b.interleave(s, peers, min(rounds, b.rounds), 1)
	return s
}
