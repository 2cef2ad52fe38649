package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// target is one performance target of issue 7 with the figure measured.
type target struct {
	what     string
	measured string
	met      string // "yes", "no", or why it could not be judged
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
		return "yes"
	}
	return "**no**"
}

// evaluateTargets compares the figures with the targets of issue 7.
func (b *bench) evaluateTargets() {
	add := func(what, measured, met string) { b.targets = append(b.targets, target{what, measured, met}) }
	missing := func(what string, names ...string) bool {
		for _, n := range names {
			if n == "" {
				add(what, "–", "not measured")
				return true
			}
		}
		return false
	}
	med := func(sec, name string, col int) (float64, string) {
		r := b.find(sec, name)
		if r == nil || col >= len(r.m) || len(r.m[col].vals) == 0 {
			return math.NaN(), ""
		}
		return r.m[col].median(), r.name
	}
	pod1, pn := med("start", "pod1 stage1", 0)
	launcher, ln := med("start", "pod1 run", 0)
	crun, cn := med("start", "crun", 0)
	floor, fn := med("start", "floor", 0)
	sd, sn := med("start", "systemd-nspawn + systemd", 0)
	w := "Pod start to exit: no slower than crun"
	if !missing(w, pn, cn) {
		add(w, fmt.Sprintf("pod1 stage1 %s ms, crun %s ms (pod1 = %s crun)", num(pod1), num(crun), ratio(pod1, crun)), yesNo(pod1 <= crun))
	}
	w = "Pod start to exit, end to end (`pod1 run` from an ACI): no slower than crun"
	if !missing(w, ln, cn) {
		add(w, fmt.Sprintf("pod1 run %s ms, crun %s ms (%s)", num(launcher), num(crun), ratio(launcher, crun)), yesNo(launcher <= crun))
	}
	w = "Pod start to exit: within 2× of the floor"
	if !missing(w, pn, fn) {
		add(w, fmt.Sprintf("pod1 stage1 %s ms, floor %s ms (%s)", num(pod1), num(floor), ratio(pod1, floor)), yesNo(pod1 <= 2*floor))
	}
	w = "Pod start to exit: at least 40× faster than nspawn booting systemd"
	if !missing(w, pn, sn) {
		add(w, fmt.Sprintf("nspawn + systemd %s ms = %s pod1 stage1", num(sd), ratio(sd, pod1)), yesNo(sd >= 40*pod1))
	}
	none, nn := med("net", "pod1 stage1 --net=none", 1)
	def, dn := med("net", "pod1 stage1 --net=default", 1)
	plugins, fln := med("net", "floor", 1)
	w = "Networking: `--net=default` adds to `--net=none` (run + gc) no more than 1.5× what the CNI plugins alone cost (ADD + DEL)"
	if !missing(w, nn, dn, fln) {
		add(w, fmt.Sprintf("default %s ms, none %s ms: networking adds %s ms; the plugins alone %s ms (%s)",
			num(def), num(none), num(def-none), num(plugins), ratio(def-none, plugins)), yesNo(def-none <= 1.5*plugins))
	}
	rss, mn := med("memory", "pod1", 0)
	pss, _ := med("memory", "pod1", 1)
	sdRss, sdn := med("memory", "systemd-nspawn + systemd", 0)
	w = "Stage1 memory: under 4 MiB RSS summed over its processes"
	if !missing(w, mn) {
		m := fmt.Sprintf("pod1 %s MiB RSS (%s MiB PSS)", num(rss), num(pss))
		if sdn != "" {
			m += fmt.Sprintf("; nspawn + systemd + journald %s MiB RSS", num(sdRss))
		}
		add(w, m, yesNo(rss < 4))
	}
	lag, rn := med("reap-timed", "pod1", 0)
	w = "Zero zombies within 1 ms of the last orphan's exit"
	if !missing(w, rn) {
		r := b.find("reap-timed", "pod1")
		m := fmt.Sprintf("%s ms median, %s ms worst, orphans exiting at the pace they were started (an upper bound: it includes the helper's wake-up and a /proc listing)",
			num(lag), num(r.m[0].max()))
		if burst, _ := med("reap-burst", "pod1", 0); !math.IsNaN(burst) {
			m += fmt.Sprintf("; %s ms when all are released at once (a backlog)", num(burst))
		}
		add(w, m, yesNo(lag <= 1))
	}
	stop, sn2 := med("stop", "pod1, app exits", 1)
	w = "Stop of a cooperative pod within 5 ms of the app's exit"
	if !missing(w, sn2) {
		all, _ := med("stop", "pod1, app exits", 0)
		add(w, fmt.Sprintf("app exit → all gone %s ms (SIGTERM → all gone %s ms)", num(stop), num(all)), yesNo(stop <= 5))
	}
	w = "`pod1 list` over 1000 pods under 100 ms"
	if r := b.find("host", "pod1 list"); r != nil {
		add(w, fmt.Sprintf("%s ms", num(r.m[0].median())), yesNo(r.m[0].median() < 100))
	} else {
		note := "not measured"
		for _, s := range b.sections {
			for _, r := range s.rows {
				if r.name == "pod1 list" && r.note != "" {
					note = r.note
				}
			}
		}
		add(w, "–", note)
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
		"`pod1 list` %d (+%d), `pod1 gc` 3; scale: %d (+1) for 100 apps, 3 for 1000 short-lived apps.\n",
		b.rounds, b.warmup, min(b.rounds, 3), min(b.rounds, 2), min(b.rounds, 10), b.rounds, b.warmup, min(b.rounds, 5))
	p("- Peers: %s.\n", strings.Join(b.versions, "; "))
	for _, n := range b.setupNotes {
		p("- %s\n", n)
	}
	if len(b.leftovers) > 0 {
		p("- **Left behind by the run:** %s\n", strings.Join(b.leftovers, "; "))
	}
	p("\n![pod1 beside its peers](benchmarks.svg)\n\n")
	p("## Targets (issue 7)\n\n| target | measured | met |\n|---|---|---|\n")
	for _, t := range b.targets {
		p("| %s | %s | %s |\n", escapeMD(t.what), escapeMD(t.measured), escapeMD(t.met))
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
	if notes, err := os.ReadFile(filepath.Join(b.repo, "bench", "profile.md")); err == nil {
		p("\n%s", notes)
	}
	p("\n---\nReproduce with `sudo make bench` (it installs crun, runc, systemd-container, tini, catatonit and conmon from Debian if they are missing).\n")
	return sb.String()
}
