package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// step is one step of issue 12's restructuring: the commit before it and
// the one after it. The restructuring came in steps, and other issues'
// work landed between them (the isolation of 2026-12-01 among it), so
// "make bench no worse after the restructuring" is judged step by step:
// each step's tree against the one before it, in the same rounds, and the
// last step's against this tree (-repo).
type step struct {
	name          string
	before, after string // commits; after "" is this tree
}

// steps12 are issue 12's steps.
var steps12 = []step{
	{"the layout package", "c74bc7d", "c3bba14"},
	{"the supervisor package, a PID 1 loop that never blocks, one logger", "5b07088", "eb07fd0"},
	{"what came since, to this tree", "eb07fd0", ""},
}

// stepCommits lists the distinct commits of the steps, in order.
func stepCommits() []string {
	var out []string
	for _, s := range steps12 {
		for _, c := range []string{s.before, s.after} {
			if c != "" && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// stepRow names the start row of the tree built at commit c.
func stepRow(c string) string { return "pod1 stage1 at " + c }

// stepTrees returns the trees of the step commits that are built in dir
// (dir/<commit>, as bench/ab-trees.sh builds them), by commit.
func stepTrees(dir string) map[string]string {
	trees := map[string]string{}
	if dir == "" {
		return trees
	}
	for _, c := range stepCommits() {
		d := filepath.Join(dir, c)
		if _, err := os.Stat(filepath.Join(d, "bin/stage1-init")); err == nil {
			trees[c] = d
		}
	}
	return trees
}

// stepNoise is how much slower a step's tree may read and still count as
// no worse: two rows of the very same binaries differed by that much in
// one sitting on the bench's host (docs/design-start.md), so a smaller difference says nothing about the code.
const stepNoise = 0.02

// stepsTarget judges issue 12's "no worse": every step's median start to
// exit at most the one before it, give or take stepNoise. It returns the
// figures and the verdict.
func (b *bench) stepsTarget(med func(sec, name string, col int) float64) (string, string) {
	var parts, missing []string
	ok := true
	for i, s := range steps12 {
		before := med("start", stepRow(s.before), 0)
		afterRow, afterName := stepRow(s.after), s.after
		if s.after == "" {
			afterRow, afterName = "pod1 stage1", "this tree"
		}
		after := med("start", afterRow, 0)
		if math.IsNaN(before) || math.IsNaN(after) {
			missing = append(missing, s.name)
			continue
		}
		ok = ok && after <= before*(1+stepNoise)
		if i > 0 && steps12[i-1].after != s.before {
			// Not the restructuring's: shown, not judged.
			prev := med("start", stepRow(steps12[i-1].after), 0)
			if !math.IsNaN(prev) {
				parts = append(parts, fmt.Sprintf("between the steps (other issues' work): %s → %s %s → %s ms (%s)", steps12[i-1].after, s.before, num(prev), num(before), ratio(before, prev)))
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %s → %s %s → %s ms (%s)", s.name, s.before, afterName, num(before), num(after), ratio(after, before)))
	}
	if len(missing) > 0 {
		return strings.Join(parts, "; "), fmt.Sprintf("not measured (%s): `make bench-ab` builds the trees of the steps in %s", strings.Join(missing, ", "), b.abDir)
	}
	parts = append(parts, fmt.Sprintf("a step counts as worse when more than %.0f%% slower (two rows of the same binaries differ by that much)", stepNoise*100))
	return strings.Join(parts, "; "), yesNo(ok)
}
