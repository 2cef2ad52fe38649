package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// metric is the samples of one quantity for one peer.
type metric struct {
	vals []float64
}

func (m *metric) add(v float64) { m.vals = append(m.vals, v) }

func (m *metric) sorted() []float64 {
	s := append([]float64(nil), m.vals...)
	sort.Float64s(s)
	return s
}

func (m *metric) median() float64 {
	s := m.sorted()
	switch n := len(s); {
	case n == 0:
		return math.NaN()
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func (m *metric) min() float64 {
	if len(m.vals) == 0 {
		return math.NaN()
	}
	return m.sorted()[0]
}

func (m *metric) max() float64 {
	if len(m.vals) == 0 {
		return math.NaN()
	}
	s := m.sorted()
	return s[len(s)-1]
}

// row is one peer in a section: one metric per column of the section.
type row struct {
	name string
	pod1 bool
	m    []metric
	// note explains a row without numbers (a peer that cannot run here)
	// or qualifies one.
	note string
	// vs names the row this one's ratio is taken against (default: the
	// section's base row); pod1 rows get no ratio unless it is set.
	vs string
	// failures counts rounds that failed and were left out.
	failures int
	lastErr  error
}

// section is one measurement: a table in the report and (when chart is
// set) a panel of the chart.
type section struct {
	id, title string
	desc      string
	unit      string
	cols      []string
	rows      []*row
	// base is the row the ratios are taken against (the first pod1 row
	// unless set).
	base string
	// ratioCol is the column the ratios compare.
	ratioCol int
	chart    bool
	logScale bool
	// noRatio drops the ratio column (pod1-only sections).
	noRatio bool
	// chartCol is the column the chart shows; targets are drawn on it
	// as dashed lines.
	chartCol int
	targets  []targetLine
	notes    []string
	// colUnits, when set, are the columns' units (else unit for all);
	// ratioLabel heads the ratio column (default "vs pod1").
	colUnits   []string
	ratioLabel string
}

// targetLine is a target of issue 7 drawn on a chart panel.
type targetLine struct {
	value float64
	label string
}

func newSection(id, title, unit string, cols ...string) *section {
	if len(cols) == 0 {
		cols = []string{"median"}
	}
	return &section{id: id, title: title, unit: unit, cols: cols}
}

// addRun records a run's fork-to-reaped time and, in a section with a
// second column, the CPU its process tree used (child.cpu).
func (r *row) addRun(c *child) {
	r.m[0].add(ms(c.elapsed()))
	if len(r.m) > 1 {
		r.m[1].add(ms(c.cpu))
	}
}

func (s *section) row(name string, pod1 bool) *row {
	for _, r := range s.rows {
		if r.name == name {
			return r
		}
	}
	r := &row{name: name, pod1: pod1, m: make([]metric, len(s.cols))}
	s.rows = append(s.rows, r)
	return r
}

func (s *section) baseRow() *row {
	for _, r := range s.rows {
		if (s.base == "" && r.pod1 || r.name == s.base) && len(r.m[s.ratioCol].vals) > 0 {
			return r
		}
	}
	return nil
}

// baseFor is the row r's ratio is taken against, or nil for none.
func (s *section) baseFor(r *row) *row {
	if r.vs != "" {
		for _, o := range s.rows {
			if o.name == r.vs && len(o.m[s.ratioCol].vals) > 0 {
				return o
			}
		}
		return nil
	}
	if r.pod1 || s.noRatio {
		return nil
	}
	return s.baseRow()
}

func (s *section) note(format string, a ...any) { s.notes = append(s.notes, fmt.Sprintf(format, a...)) }

// record runs one round into a scratch row and keeps its figures in r only
// if the whole round, checks included, succeeded and it is not a warm-up.
func (r *row) record(warmup bool, f func(*row) error) error {
	scratch := &row{m: make([]metric, len(r.m))}
	if err := f(scratch); err != nil {
		r.fail(err)
		return err
	}
	if !warmup {
		for k := range scratch.m {
			r.m[k].vals = append(r.m[k].vals, scratch.m[k].vals...)
		}
	}
	return nil
}

// fail records a failed round of a row.
func (r *row) fail(err error) {
	r.failures++
	r.lastErr = err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// num formats a value with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func ratio(v, base float64) string {
	if math.IsNaN(v) || math.IsNaN(base) || base == 0 {
		return "–"
	}
	r := v / base
	if r >= 10 {
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

func cell(m *metric) string {
	if len(m.vals) == 0 {
		return "–"
	}
	if len(m.vals) == 1 {
		return num(m.vals[0])
	}
	return fmt.Sprintf("**%s** (%s–%s)", num(m.median()), num(m.min()), num(m.max()))
}

func escapeMD(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
