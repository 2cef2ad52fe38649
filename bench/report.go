package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// target is one performance target of the issues with the figure
// measured.
type target struct {
	issues   string // the issues that set it, "7, 16"
	what     string
	measured string
	met      string // "met", "**no**", or why it could not be judged
}

func (b *bench) find(section, rowPrefix string) *row {
	for _, s := range b.sections {
		if s.id != section {
			continue
		}
		for _, r := range s.rows {
			if strings.HasPrefix(r.name, rowPrefix) && len(r.m[0].vals) > 0 {
				return r
			}
		}
	}
	return nil
}

func yesNo(ok bool) string {
	if ok {
		return "met"
	}
	return "**no**"
}

// rowNote is the note of a row without figures (why it could not run),
// or "not measured".
func (b *bench) rowNote(section, name string) string {
	for _, s := range b.sections {
		for _, r := range s.rows {
			if s.id == section && strings.HasPrefix(r.name, name) {
				switch {
				case r.note != "":
					return r.note
				case r.lastErr != nil:
					return "failed: " + r.lastErr.Error()
				}
			}
		}
	}
	return "not measured"
}

// evaluateTargets compares the figures with the targets of issues 7
// (performance), 12 (no worse after the restructuring), 14 (networking),
// 15 (logging) and 16 (start and memory).
func (b *bench) evaluateTargets() {
	add := func(issues, what, measured, met string) {
		b.targets = append(b.targets, target{issues, what, measured, met})
	}
	med := func(sec, name string, col int) (float64, string) {
		r := b.find(sec, name)
		if r == nil || col >= len(r.m) || len(r.m[col].vals) == 0 {
			return math.NaN(), ""
		}
		return r.m[col].median(), r.name
	}
	// missing records a target that cannot be judged, with the reason of
	// the first row without figures, and says so.
	missing := func(issues, what string, rows ...[2]string) bool {
		for _, r := range rows {
			if b.find(r[0], r[1]) == nil {
				add(issues, what, "–", b.rowNote(r[0], r[1]))
				return true
			}
		}
		return false
	}
	stage1 := [2]string{"start", "pod1 stage1"}
	pod1, _ := med("start", "pod1 stage1", 0)
	launcher, _ := med("start", "pod1 run", 0)
	crun, _ := med("start", "crun", 0)
	floor, _ := med("start", "floor", 0)
	sd, _ := med("start", "systemd-nspawn + systemd", 0)
	w := "Pod start to exit: no slower than crun"
	if !missing("7, 16", w, stage1, [2]string{"start", "crun"}) {
		m := fmt.Sprintf("pod1 stage1 %s ms, crun %s ms (pod1 = %s crun)", num(pod1), num(crun), ratio(pod1, crun))
		if pc, _ := med("start", "pod1 stage1", 1); !math.IsNaN(pc) {
			cc, _ := med("start", "crun", 1)
			m += fmt.Sprintf("; CPU %s ms against %s ms (%s)", num(pc), num(cc), ratio(pc, cc))
		}
		add("7, 16", w, m, yesNo(pod1 <= crun))
	}
	w = "Pod start to exit: within 2× of the floor"
	if !missing("7, 16", w, stage1, [2]string{"start", "floor"}) {
		add("7, 16", w, fmt.Sprintf("pod1 stage1 %s ms, floor %s ms (%s)", num(pod1), num(floor), ratio(pod1, floor)), yesNo(pod1 <= 2*floor))
	}
	w = "`pod1 run` end to end: within 1.5× of the stage1 alone"
	if !missing("16", w, stage1, [2]string{"start", "pod1 run"}) {
		add("16", w, fmt.Sprintf("pod1 run %s ms, stage1 %s ms (%s)", num(launcher), num(pod1), ratio(launcher, pod1)), yesNo(launcher <= 1.5*pod1))
	}
	w = "Pod start to exit, end to end (`pod1 run` from an ACI): no slower than crun"
	if !missing("7", w, [2]string{"start", "pod1 run"}, [2]string{"start", "crun"}) {
		add("7", w, fmt.Sprintf("pod1 run %s ms, crun %s ms (%s)", num(launcher), num(crun), ratio(launcher, crun)), yesNo(launcher <= crun))
	}
	w = "Pod start to exit: at least 40× faster than nspawn booting systemd"
	if !missing("7", w, stage1, [2]string{"start", "systemd-nspawn + systemd"}) {
		add("7", w, fmt.Sprintf("nspawn + systemd %s ms = %s pod1 stage1", num(sd), ratio(sd, pod1)), yesNo(sd >= 40*pod1))
	}
	rss, _ := med("memory", "pod1", 0)
	pss, _ := med("memory", "pod1", 1)
	sdRss, sdn := med("memory", "systemd-nspawn + systemd", 0)
	memRow := [2]string{"memory", "pod1"}
	mem := func() string {
		m := fmt.Sprintf("pod1 %s MiB RSS (%s MiB PSS)", num(rss), num(pss))
		if d := b.memDetail["pod1 stage1"]; d != "" {
			m += "; last round: " + d
		}
		if sdn != "" {
			m += fmt.Sprintf("; nspawn + systemd + journald %s MiB RSS", num(sdRss))
		}
		return m
	}
	w = "Stage1 memory: at most 3 MiB RSS summed over its processes (waiter, PID 1, lock keeper) while an app sleeps"
	if !missing("16", w, memRow) {
		add("16", w, mem(), yesNo(rss <= 3))
	}
	w = "Stage1 memory: under 4 MiB RSS summed over its processes"
	if !missing("7", w, memRow) {
		add("7", w, fmt.Sprintf("pod1 %s MiB RSS", num(rss)), yesNo(rss < 4))
	}
	lag, _ := med("reap-timed", "pod1", 0)
	w = "Zero zombies within 1 ms of the last orphan's exit"
	if !missing("7, 16", w, [2]string{"reap-timed", "pod1"}) {
		r := b.find("reap-timed", "pod1")
		m := fmt.Sprintf("%s ms median, %s ms worst, orphans exiting at the pace they were started (an upper bound: it includes the helper's wake-up and a /proc listing)",
			num(lag), num(r.m[0].max()))
		if burst, _ := med("reap-burst", "pod1", 0); !math.IsNaN(burst) {
			m += fmt.Sprintf("; %s ms when all are released at once (a backlog)", num(burst))
		}
		add("7, 16", w, m, yesNo(lag <= 1))
	}
	stop, _ := med("stop", "pod1, app exits", 1)
	w = "Stop of a cooperative pod within 5 ms of the app's exit"
	if !missing("7, 16", w, [2]string{"stop", "pod1, app exits"}) {
		all, _ := med("stop", "pod1, app exits", 0)
		add("7, 16", w, fmt.Sprintf("app exit → all gone %s ms (SIGTERM → all gone %s ms)", num(stop), num(all)), yesNo(stop <= 5))
	}
	w = "`pod1 list` over 1000 pods under 100 ms"
	if !missing("7, 16", w, [2]string{"host", "pod1 list"}) {
		l, _ := med("host", "pod1 list", 0)
		add("7, 16", w, fmt.Sprintf("%s ms", num(l)), yesNo(l < 100))
	}
	w = "`pod1 gc` of 1000 pods under 1 s"
	if !missing("16", w, [2]string{"host", "pod1 gc"}) {
		g, _ := med("host", "pod1 gc", 0)
		m := fmt.Sprintf("%s ms", num(g))
		if rm, rn := med("host", gcFloorRow, 0); rn != "" {
			m += fmt.Sprintf("; `rm -rf` of the same pods %s ms (gc = %s the floor)", num(rm), ratio(g, rm))
		}
		add("16", w, m, yesNo(g < 1000))
	}
	none, _ := med("net", "pod1 stage1 --net=none", 1)
	def, _ := med("net", "pod1 stage1 --net=default", 1)
	plugins, _ := med("net", "floor", 1)
	w = "Networking: `--net=default` adds to `--net=none` (run + gc) no more than 1.5× what the CNI plugins alone cost (ADD + DEL)"
	if !missing("14", w, [2]string{"net", "pod1 stage1 --net=none"}, [2]string{"net", "pod1 stage1 --net=default"}, [2]string{"net", "floor"}) {
		add("14", w, fmt.Sprintf("default %s ms, none %s ms: networking adds %s ms; the plugins alone %s ms (%s)",
			num(def), num(none), num(def-none), num(plugins), ratio(def-none, plugins)), yesNo(def-none <= 1.5*plugins))
	}
	w = "Logging: lines per second an app writes through pod1 to the journal and to a file, beside nspawn + journald, and the memory logging adds (rows, no figure to meet)"
	if !missing("15", w, [2]string{"logs", "pod1, to the journal"}, [2]string{"logs", "pod1, to its log files"}) {
		j, _ := med("logs", "pod1, to the journal", 0)
		f, _ := med("logs", "pod1, to its log files", 0)
		m := fmt.Sprintf("pod1 to the journal %s lines/s, to its files %s lines/s", num(j), num(f))
		if sj, sjn := med("logs", "systemd-nspawn + systemd + journald", 0); sjn != "" {
			m += fmt.Sprintf("; nspawn + journald %s lines/s", num(sj))
		}
		rj, _ := med("logs-memory", "pod1, to the journal", 0)
		rf, _ := med("logs-memory", "pod1, to its log files", 0)
		rn, _ := med("logs-memory", "pod1, no logging", 0)
		m += fmt.Sprintf("; PID 1 RSS %s MiB to the journal, %s to files, %s without logging", num(rj), num(rf), num(rn))
		add("15", w, m, "measured")
	}
}

// markdown renders the report.
func (b *bench) markdown() string {
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	p("# pod1 benchmarks\n\n")
	p("Written by `make bench` (`bench/`) on %s; the whole run took %v. ", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		time.Since(b.started).Round(time.Second))
	p("Everything below is one run: every peer was measured on the same machine in the same run, interleaved round by round " +
		"(in each round every peer runs once, in an order rotated from round to round), after warm-up rounds that are not recorded. " +
		"Figures are **median** (min–max) over the rounds; \"vs pod1\" is the peer's median divided by pod1's.\n\n")
	p("- Machine: %s.\n", machine())
	p("- Rounds: start to exit %d (+%d warm-up); memory 3 (+1); reaping %d (+1, with a tenth of the orphans) when the orphans exit at their own pace and %d (+1) when released at once; stopping %d (+1); "+
		"`pod1 list` %d (+%d), `pod1 gc` and its `rm -rf` floor 3; scale: %d (+1) for 100 apps, 3 for 1000 short-lived apps; "+
		"start-latency tricks %d (+%d) for the start, %d (+1) for the memory and the stop.\n",
		b.rounds, b.warmup, min(b.rounds, 3), min(b.rounds, 2), b.stopRounds(), b.rounds, b.warmup, min(b.rounds, 5),
		b.trickStartRounds(), b.warmup, b.trickRounds())
	p("- Peers: %s.\n", strings.Join(b.versions, "; "))
	p("- Load average (1 minute) as each measurement began: %s; at the end %s. The machine may be shared: "+
		"ratios within one run are what the targets judge. The burst reaping rows make all their orphans runnable at once: "+
		"the averages read after them are the bench's own load as much as anyone's.\n", strings.Join(b.loads, ", "), loadavg())
	p("- CPU time the hypervisor took from this machine during each measurement (steal, from /proc/stat): %s. "+
		"On a shared host it slows every peer, not evenly; a sitting with much of it is not comparable with a quiet one.\n", strings.Join(b.steals, ", "))
	for _, n := range b.setupNotes {
		p("- %s\n", n)
	}
	if len(b.leftovers) > 0 {
		p("- **Left behind by the run:** %s\n", strings.Join(b.leftovers, "; "))
	}
	p("\n![pod1 beside its peers](benchmarks.svg)\n\n")
	p("## Targets (issues 7, 14, 15, 16)\n\nEach from the figures of this run.\n\n| issue | target | measured | met |\n|---|---|---|---|\n")
	for _, t := range b.targets {
		p("| %s | %s | %s | %s |\n", t.issues, escapeMD(t.what), escapeMD(t.measured), escapeMD(t.met))
	}
	for i, s := range b.sections {
		p("\n## %d. %s\n\n%s\n\n", i+1, s.title, s.desc)
		p("| runtime |")
		for i, c := range s.cols {
			u := s.unit
			if i < len(s.colUnits) {
				u = s.colUnits[i]
			}
			p(" %s (%s) |", c, u)
		}
		if !s.noRatio {
			label := s.ratioLabel
			if label == "" {
				label = "vs pod1"
			}
			p(" %s |", label)
		}
		p(" rounds |\n|---|")
		for range s.cols {
			p("---:|")
		}
		if !s.noRatio {
			p("---:|")
		}
		p("---:|\n")
		for _, r := range s.rows {
			name := r.name
			if r.pod1 {
				name = "**" + name + "**"
			}
			cols := len(s.cols) + 1
			if !s.noRatio {
				cols++
			}
			if len(r.m[0].vals) == 0 {
				note := r.note
				if note == "" && r.lastErr != nil {
					note = "failed: " + r.lastErr.Error()
				}
				p("| %s | %s |%s\n", escapeMD(name), escapeMD(note), strings.Repeat(" |", cols-1))
				continue
			}
			p("| %s |", escapeMD(name))
			for i := range s.cols {
				p(" %s |", cell(&r.m[i]))
			}
			if !s.noRatio {
				rt := "–"
				if base := s.baseFor(r); base != nil {
					rt = ratio(r.m[s.ratioCol].median(), base.m[s.ratioCol].median())
				}
				p(" %s |", rt)
			}
			n := fmt.Sprint(len(r.m[0].vals))
			if r.failures > 0 {
				n += fmt.Sprintf(" (%d failed: %s)", r.failures, r.lastErr)
			}
			p(" %s |\n", escapeMD(n))
		}
		for _, n := range s.notes {
			p("\n%s\n", n)
		}
		for _, r := range s.rows {
			if r.note != "" && len(r.m[0].vals) > 0 {
				p("\n%s: %s\n", r.name, r.note)
			}
		}
	}
	p("%s", reportEnd)
	return sb.String()
}

// reportEnd closes every report. The report is the last run's figures
// and nothing else, rewritten whole by each run (git keeps the earlier
// ones): why pod1 is built as these figures show, and what each of its
// tricks buys, is the design note's, which changes with the design, not
// with every sitting. Notes appended run after run grew into a diary
// longer than the report.
const reportEnd = "\n## Why pod1 is built this way\n\n" +
	"What each piece of pod1's start, stop and memory design buys, in the figures above, what was tried and did not pay, " +
	"and the off switches: [design-start.md](design-start.md).\n" +
	"\n---\nReproduce with `sudo make bench` (it installs crun, runc, systemd-container, tini, catatonit, conmon and iptables from Debian if they are missing).\n"
