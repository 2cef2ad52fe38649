package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// headings lists the Markdown headings of md, in order.
func headings(md string) []string {
	var hs []string
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "#") {
			hs = append(hs, l)
		}
	}
	return hs
}

// The report is the run's figures alone: the header (machine, rounds,
// peers, load), the targets, a table per measurement and the pointer to
// the design note. Nothing kept in the tree is appended to it: notes
// added that way, sitting after sitting, outgrew the report they followed.
func TestReportLayout(t *testing.T) {
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "bench"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Where the bench once read its hand-written notes from.
	if err := os.WriteFile(filepath.Join(repo, "bench", "profile.md"), []byte("## Where the time goes (a sitting's notes)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{repo: repo, started: time.Now(), rounds: 3, warmup: 1,
		versions: []string{"crun: crun version 1.8.1"}, loads: []string{"start 0.10"}, steals: []string{"start 0.0%"}}
	s := newSection("start", "Pod start to exit: one app running `true`", "ms", "median", "CPU")
	s.desc = "From fork+exec of the runtime to its exit."
	pod1 := s.row("pod1 stage1 (prepared pod)", true)
	crun := s.row("crun", false)
	for i, v := range []float64{20, 22, 24} {
		pod1.m[0].add(v)
		pod1.m[1].add(v + 3)
		crun.m[0].add(float64(14 + i))
		crun.m[1].add(9)
	}
	s.row("runc", false).note = "runc is not installed"
	b.sections = append(b.sections, s)
	b.evaluateTargets()
	md := b.markdown()

	want := []string{
		"# pod1 benchmarks",
		"## Targets (issues 7, 14, 15, 16)",
		"## 1. Pod start to exit: one app running `true`",
		"## Why pod1 is built this way",
	}
	if got := headings(md); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("headings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(md, "a sitting's notes") {
		t.Error("the report carries a file of the tree")
	}
	if !strings.HasSuffix(md, reportEnd) {
		t.Errorf("the report does not end with the pointer to the design note and how to reproduce it:\n%s", md)
	}
	for _, w := range []string{
		"| **pod1 stage1 (prepared pod)** | **22.0** (20.0–24.0) | **25.0** (23.0–27.0) | – | 3 |",
		"| crun | **15.0** (14.0–16.0) | **9.00** (9.00–9.00) | 0.68× | 3 |",
		"| runc | runc is not installed |",
		"| 7, 16 | Pod start to exit: no slower than crun | pod1 stage1 22.0 ms, crun 15.0 ms (pod1 = 1.47× crun); CPU 25.0 ms against 9.00 ms (2.78×) | **no** |",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("the report lacks %q:\n%s", w, md)
		}
	}
}

// docs/benchmarks.md is a report as the bench writes it (the last full
// run's), short enough to read, and its links lead somewhere; the design
// note it points to stays a note.
func TestCommittedReport(t *testing.T) {
	b, err := os.ReadFile("../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	if n := strings.Count(md, "\n"); n > 400 {
		t.Errorf("docs/benchmarks.md has %d lines: a report of one run has at most 400", n)
	}
	if !strings.HasSuffix(md, reportEnd) {
		t.Error("docs/benchmarks.md does not end as the bench ends a report: something follows or replaced the pointer to the design note")
	}
	hs := headings(md)
	if len(hs) < 3 || hs[0] != "# pod1 benchmarks" || !strings.HasPrefix(hs[1], "## Targets ") || hs[len(hs)-1] != "## Why pod1 is built this way" {
		t.Fatalf("docs/benchmarks.md is not laid out as the bench writes it: headings %q", hs)
	}
	for i, h := range hs[2 : len(hs)-1] {
		if !strings.HasPrefix(h, "## "+strconv.Itoa(i+1)+". ") {
			t.Errorf("heading %q where the bench writes measurement %d", h, i+1)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)[^)]*\)`).FindAllStringSubmatch(md, -1) {
		if _, err := os.Stat(filepath.Join("../docs", m[1])); err != nil {
			t.Errorf("docs/benchmarks.md links to %s: %v", m[1], err)
		}
	}
	note, err := os.ReadFile("../docs/design-start.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(note), "\n"); n > 300 {
		t.Errorf("docs/design-start.md has %d lines: the design note has at most 300", n)
	}
	// Its table of tricks links to its own sections.
	slugs := map[string]bool{}
	for _, h := range headings(string(note)) {
		slug := strings.ToLower(strings.TrimLeft(h, "# "))
		slug = regexp.MustCompile("[^a-z0-9 -]").ReplaceAllString(slug, "")
		slugs[strings.ReplaceAll(slug, " ", "-")] = true
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(note), -1) {
		if !slugs[m[1]] {
			t.Errorf("docs/design-start.md links to #%s, which is none of its headings", m[1])
		}
	}
}
