package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/pod1/pod1/starttricks"
)

// namedOpts is a row's name and its pod's settings.
type namedOpts struct {
	name string
	o    podOpts
}

// The rows of the tricks' measurements: every trick on (the base), every
// trick on again (the control: what two rows of the very same binaries
// and settings differ by in this run), and one trick off a row.
const (
	trickBase    = "every trick on"
	trickControl = "every trick on, again"
)

func trickRow(t starttricks.Trick) string { return t.Name() + " off" }

// trickRows are the base, the control and a row for each trick of ts.
func trickRows(ts ...starttricks.Trick) []namedOpts {
	rows := []namedOpts{{trickBase, podOpts{}}, {trickControl, podOpts{}}}
	for _, t := range ts {
		rows = append(rows, namedOpts{trickRow(t), podOpts{env: []string{starttricks.Env + "=" + t.Name()}}})
	}
	return rows
}

// trickSettle is how long a pod of the memory rows runs before its memory
// is read.
const trickSettle = 2 * time.Second

// trickRounds is how many rounds the memory and stop tricks take (make
// bench-ab asks for 25: what a trick buys is a few percent).
func (b *bench) trickRounds() int { return b.rounds }

// trickStartRounds is how many rounds the start tricks take: a start is
// cheap, and a trick worth 5 % of it is within the noise of 15 paired
// rounds (the sign test alone asks for 12 of 15 higher off).
func (b *bench) trickStartRounds() int { return 8 * b.rounds }

// measureTricks measures what each start-latency trick (package
// starttricks) buys, in the same rounds as the pod with every trick on:
// the start for every trick, and the memory and the stop for the tricks
// that are about them. Each round runs every row once.
func (b *bench) measureTricks(want func(string) bool) []*section {
	all := starttricks.All()
	rounds := b.trickRounds()
	trueArgv := []string{"/true"}
	var out []*section

	start := newSection("tricks-start", "Start-latency tricks: start to exit, each trick off", "ms", "median", "CPU")
	start.desc = "pod1's stage1 alone, as in the start to exit measurement (one app running the tiny `true`), " +
		"with every start-latency trick on, the same again, and with one trick off (`" + starttricks.Env + "`), " +
		"interleaved round by round. " + trickMethod
	var peers []*peer
	for _, v := range trickRows(all...) {
		peers = append(peers, &peer{name: v.name, pod1: true, round: func(r *row) error {
			return b.truePodRound(r, trueArgv, v.o)
		}})
	}
	if want("tricks-start") {
		b.interleave(start, peers, b.trickStartRounds(), b.warmup)
		judgeTricks(start, []string{"start to exit", "CPU"})
		out = append(out, start)
	}

	mem := newSection("tricks-memory", "Start-latency tricks: the stage1's memory while one app sleeps, each memory trick off", "MiB", "RSS", "PSS")
	mem.desc = "As in the memory measurement: RSS and PSS summed over the run entry point, PID 1, pod1-pause and the lock keeper, read " +
		trickSettle.String() + " after the app started (longer than there: what a process faults back in after shedding comes over time), " +
		"for the tricks about memory. " + trickMethod
	peers = nil
	for _, v := range trickRows(starttricks.Shed) {
		peers = append(peers, &peer{name: v.name, pod1: true, round: func(r *row) error {
			return b.pod1MemRound(r, []string{"/probe", "sleep", "60s"}, v.o, trickSettle, func(r *row, pids []int) error {
				_, err := sumMemory(r, pids)
				return err
			})
		}})
	}
	if want("tricks-memory") {
		b.interleave(mem, peers, rounds, 1)
		judgeTricks(mem, []string{"RSS", "PSS"})
		out = append(out, mem)
	}

	stop := newSection("tricks-stop", "Start-latency tricks: the stop, each stop trick off", "ms", "SIGTERM → all gone", "app exit → all gone")
	stop.desc = "As in the stopping measurement, the app exiting on SIGTERM, for the tricks on the stop's path. " + trickMethod
	peers = nil
	for _, v := range trickRows(starttricks.Commit, starttricks.Shed) {
		peers = append(peers, b.pod1StopPeerOpts(v.name, []string{"/probe", "term-exit", "0", "+", "sleep", "60s"}, nil, "term-exit ready", 0, v.o))
	}
	if want("tricks-stop") {
		b.interleave(stop, peers, rounds, 1)
		judgeTricks(stop, []string{"SIGTERM → all gone", "app exit → all gone"})
		out = append(out, stop)
	}

	for _, s := range out {
		s.chart = false
		s.ratioLabel = "off ÷ on (medians)"
		for _, r := range s.rows {
			if r.name != trickBase {
				r.vs = trickBase
			}
		}
	}
	return out
}

// trickMethod says how a trick is judged.
const trickMethod = "Each round runs every row once, in an order rotated from round to round, so each row's i-th " +
	"figure is paired with the base's (every trick on) of the same round: the ratios below are the median of " +
	"those paired ratios, off ÷ on, with their interquartile range, and how many rounds had the figure higher " +
	"off than on. The control row (every trick on, again) says what the same binaries differ by in this run. " +
	"A trick beats the noise on a figure when its median paired ratio exceeds 1 by more than the control's " +
	"differs from 1, and the rounds higher off are more than chance gives (a sign test: at most a 2.5% chance " +
	"of as many with two equal rows)."

// judgeTricks adds to s the table of paired ratios of each row against
// the base, for the columns named cols, and whether each trick beats the
// noise the control row shows.
func judgeTricks(s *section, cols []string) {
	base := s.row(trickBase, true)
	ctrl := s.row(trickControl, true)
	noise := make([]float64, len(cols))
	for k := range cols {
		med, _, _, _, n := pairedRatios(&ctrl.m[k], &base.m[k])
		if n == 0 {
			noise[k] = math.NaN()
			continue
		}
		noise[k] = math.Abs(med - 1)
	}
	var sb strings.Builder
	sb.WriteString("| row |")
	for _, c := range cols {
		fmt.Fprintf(&sb, " %s: off ÷ on, paired (IQR) | rounds higher off | beats the noise |", c)
	}
	sb.WriteString("\n|---|")
	for range cols {
		sb.WriteString("---:|---:|---|")
	}
	sb.WriteString("\n")
	for _, r := range s.rows {
		if r == base {
			continue
		}
		fmt.Fprintf(&sb, "| %s |", r.name)
		for k := range cols {
			med, q1, q3, higher, n := pairedRatios(&r.m[k], &base.m[k])
			if n == 0 {
				sb.WriteString(" – | – | – |")
				continue
			}
			verdict := "–"
			if r != ctrl {
				verdict = "no"
				if med-1 > noise[k] && signTail(higher, n) <= 0.025 {
					verdict = "**yes**"
				}
			}
			fmt.Fprintf(&sb, " **%.3f** (%.3f–%.3f) | %d of %d | %s |", med, q1, q3, higher, n, verdict)
		}
		sb.WriteString("\n")
	}
	var ns []string
	for k, c := range cols {
		ns = append(ns, fmt.Sprintf("%s %.1f%%", c, 100*noise[k]))
	}
	s.notes = append(s.notes, sb.String(), "The control's paired ratio in this run differs from 1 by: "+strings.Join(ns, ", ")+".")
}

// pairedRatios are the ratios of a's i-th figure to b's, for the rounds
// both have (a round a row failed is missing from it, which pairs the
// rest of that row with the next round's figures: the failures column
// says when): their median, quartiles, how many are above 1, and count.
func pairedRatios(a, b *metric) (med, q1, q3 float64, higher, n int) {
	n = min(len(a.vals), len(b.vals))
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN(), 0, 0
	}
	rs := make([]float64, n)
	for i := range rs {
		rs[i] = a.vals[i] / b.vals[i]
		if rs[i] > 1 {
			higher++
		}
	}
	sort.Float64s(rs)
	q := func(p float64) float64 {
		x := p * float64(n-1)
		lo := int(math.Floor(x))
		hi := min(lo+1, n-1)
		return rs[lo] + (rs[hi]-rs[lo])*(x-float64(lo))
	}
	return q(0.5), q(0.25), q(0.75), higher, n
}

// signTail is the chance that k or more of n rounds come out higher when
// each is a coin toss: the binomial tail, for the sign test.
func signTail(k, n int) float64 {
	p := 0.0
	for i := k; i <= n; i++ {
		// C(n, i) / 2^n, in logarithms.
		lc, _ := math.Lgamma(float64(n + 1))
		li, _ := math.Lgamma(float64(i + 1))
		lr, _ := math.Lgamma(float64(n - i + 1))
		p += math.Exp(lc - li - lr - float64(n)*math.Ln2)
	}
	return p
}
