// Command bench runs pod1 side by side with the peers a user could choose
// instead (crun, runc, systemd-nspawn with and without systemd, tini,
// catatonit, conmon), interleaved round by round on the same machine, and
// writes the medians, ranges and ratios as a Markdown report and an SVG
// chart, with each performance target of issue 7 and whether it is met.
//
// It needs root and is run by `make bench`, which builds what it uses and
// installs the peers from Debian. Every subprocess is bounded by a
// timeout; the bench is the subreaper of everything it starts, and removes
// what it set up (its cgroup, the mounts it added for the peers, its
// scratch directory) before it exits.
package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "helper" {
		os.Exit(helperMain(os.Args[2:]))
	}
	os.Exit(benchMain())
}

func benchMain() int {
	b := &bench{log: os.Stderr, started: time.Now()}
	out := flag.String("out", "docs/benchmarks.md", "Markdown report to write (\"\" for none)")
	svg := flag.String("svg", "docs/benchmarks.svg", "SVG chart to write (\"\" for none)")
	flag.StringVar(&b.repo, "repo", ".", "the pod1 source tree (bin/ and build/ are used)")
	flag.IntVar(&b.rounds, "rounds", 15, "measured rounds of the fast measurements (slower ones use fewer)")
	flag.IntVar(&b.warmup, "warmup", 2, "warm-up rounds, not recorded")
	orphans := flag.Int("orphans", 20000, "orphans of the reaping measurement")
	npods := flag.Int("pods", 1000, "pods of the host tools measurement")
	flag.StringVar(&b.peers, "peers", "", "comma-separated words: only the interleaved rows whose name contains one (e.g. \"pod1 stage1,floor\"); all by default")
	vs := flag.String("vs", "", "comma-separated other pod1 trees (built: bin/, build/): the stage1 start and the cooperative stop of each are measured in the same rounds as -repo's, a row each")
	only := flag.String("only", "", "comma-separated measurements to run (start,memory,reap,stop,host,scale,logs,net; tricks, or a part of it: tricks-start,tricks-memory,tricks-stop); all by default")
	flag.Parse()
	if os.Getuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: needs root (it starts pods and containers): sudo make bench")
		return 1
	}
	var err error
	if b.repo, err = filepath.Abs(b.repo); err != nil {
		return fail(err)
	}
	for _, d := range strings.Split(*vs, ",") {
		if d == "" {
			continue
		}
		if d, err = filepath.Abs(d); err != nil {
			return fail(err)
		}
		if _, err := os.Stat(filepath.Join(d, "bin/stage1-init")); err != nil {
			return fail(fmt.Errorf("-vs %s: %w", d, err))
		}
		b.vs = append(b.vs, d)
	}
	b.stage1Init = filepath.Join(b.repo, "bin/stage1-init")
	b.pod1Bin = filepath.Join(b.repo, "bin/pod1")
	b.probe = filepath.Join(b.repo, "bin/probe")
	for _, f := range []string{b.stage1Init, b.pod1Bin, b.probe, filepath.Join(b.repo, "build/stage1.aci")} {
		if _, err := os.Stat(f); err != nil {
			return fail(fmt.Errorf("%s missing: run make all image first (%w)", f, err))
		}
	}
	if b.self, err = os.Executable(); err != nil {
		return fail(err)
	}
	// The reaping rows run this binary inside pods and containers, whose
	// roots hold no dynamic loader.
	if f, err := elf.Open(b.self); err == nil {
		dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
		_ = f.Close()
		if dynamic {
			return fail(fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0 (make bin/bench); it runs inside pods", b.self))
		}
	}
	if err := startReaper(); err != nil {
		return fail(err)
	}
	// Bound the whole run, and clean up on interruption.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "bench: %v: stopping\n", s)
		case <-time.After(30 * time.Minute):
			fmt.Fprintln(os.Stderr, "bench: ran 30 minutes: stopping")
		}
		killAll()
		b.cleanup()
		os.Exit(1)
	}()
	defer b.cleanup()
	if err := b.setup(); err != nil {
		return fail(err)
	}
	b.ensureHybridForCrun()
	b.ensureNspawnRun()
	if n := b.cgroupMoveCost(); n != "" {
		b.setupNotes = append(b.setupNotes, n)
	}
	want := func(id string) bool {
		if *only == "" {
			return true
		}
		for _, x := range strings.Split(*only, ",") {
			// "tricks" is every tricks-* part, and runs for any.
			if x == id || x == "tricks" && strings.HasPrefix(id, "tricks") || id == "tricks" && strings.HasPrefix(x, "tricks-") {
				return true
			}
		}
		return false
	}
	steps := []struct {
		id  string
		run func() []*section
	}{
		{"start", func() []*section { return []*section{b.measureStart()} }},
		{"memory", func() []*section { return []*section{b.measureMemory()} }},
		// The stop before the reaping: its bursts of 20,000 orphans
		// leave the kernel freeing them, and the load average in the
		// thousands, for minutes, and the stop's target is a few
		// milliseconds.
		{"stop", func() []*section { return []*section{b.measureStop()} }},
		// Each start-latency trick off beside every trick on (make
		// bench-ab runs this alone), also before the reaping: a trick
		// worth a few percent is lost in the load that leaves.
		{"tricks", func() []*section { return b.measureTricks(want) }},
		{"reap", func() []*section { return b.measureReap(*orphans) }},
		{"host", func() []*section { return b.measureHostTools(*npods) }},
		{"scale", func() []*section { return b.measureScale() }},
		{"logs", func() []*section { return b.measureLogs() }},
		{"net", func() []*section { return []*section{b.measureNet()} }},
	}
	// The tricks run early but are reported last, after the peers'
	// rows they refine.
	var tricks []*section
	for _, st := range steps {
		if !want(st.id) {
			continue
		}
		l := loadavg()
		b.loads = append(b.loads, st.id+" "+l)
		fmt.Fprintf(os.Stderr, "bench: %s (load %s) ", st.id, l)
		t := time.Now()
		t0, s0 := cpuTimes()
		if secs := st.run(); st.id == "tricks" {
			tricks = secs
		} else {
			b.sections = append(b.sections, secs...)
		}
		t1, s1 := cpuTimes()
		b.steals = append(b.steals, st.id+" "+stealShare(t0, s0, t1, s1))
		b.logf("%s done in %v", st.id, time.Since(t).Round(time.Millisecond))
	}
	b.sections = append(b.sections, tricks...)
	b.forgetContainers()
	b.cleanup()
	b.evaluateTargets()
	md := b.markdown()
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			return fail(err)
		}
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(b.chart()), 0o644); err != nil {
			return fail(err)
		}
	}
	if len(b.leftovers) > 0 {
		fmt.Fprintf(os.Stderr, "bench: left behind: %s\n", strings.Join(b.leftovers, "; "))
		return 1
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	return 1
}

// killAll kills every process group we started that is still running.
func killAll() {
	reap.mu.Lock()
	var cs []*child
	for _, c := range reap.procs {
		cs = append(cs, c)
	}
	reap.mu.Unlock()
	for _, c := range cs {
		c.kill()
	}
	for _, c := range cs {
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
	}
}

// forgetContainers deletes any container of ours crun or runc still
// knows (a round killed on timeout).
func (b *bench) forgetContainers() {
	prefix := fmt.Sprintf("pod1-bench-%d-", os.Getpid())
	for tool, state := range map[string]string{"crun": "/run/crun", "runc": "/run/runc"} {
		ents, _ := os.ReadDir(state)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				b.ociForget(tool, e.Name())
			}
		}
	}
}
