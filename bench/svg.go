package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// The chart: one panel per compared measurement, one horizontal bar per
// runtime (its median), a whisker for min–max, the value and its ratio to
// pod1 written at the end of the bar; pod1's bars in orange, the peers'
// in grey, so the question "where does pod1 stand" is answered by colour
// and length alone. Time panels use a log scale: the peers span three
// orders of magnitude.

const (
	svgW     = 1100
	labelW   = 400
	barX     = labelW + 10
	barW     = 430
	rowH     = 22
	panelGap = 24
	pod1Col  = "#e8590c"
	peerCol  = "#adb5bd"
	pssCol   = "#495057"
)

type scale struct {
	log    bool
	lo, hi float64
}

func (s scale) x(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return barX
	}
	var f float64
	if s.log {
		f = (math.Log10(v) - math.Log10(s.lo)) / (math.Log10(s.hi) - math.Log10(s.lo))
	} else {
		f = (v - s.lo) / (s.hi - s.lo)
	}
	return barX + math.Max(0, math.Min(1, f))*barW
}

func (s scale) ticks() []float64 {
	var out []float64
	if s.log {
		for e := math.Floor(math.Log10(s.lo)); e <= math.Ceil(math.Log10(s.hi)); e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if v >= s.lo && v <= s.hi {
					out = append(out, v)
				}
			}
		}
		return out
	}
	step := math.Pow(10, math.Floor(math.Log10(s.hi/4)))
	for _, m := range []float64{1, 2, 5, 10} {
		if s.hi/(m*step) <= 6 {
			step *= m
			break
		}
	}
	for v := 0.0; v <= s.hi; v += step {
		out = append(out, v)
	}
	return out
}

func newScale(vals []float64, log bool) scale {
	lo, hi := math.Inf(1), 0.0
	for _, v := range vals {
		if v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if hi == 0 {
		return scale{log: log, lo: 0.1, hi: 1}
	}
	if !log {
		return scale{lo: 0, hi: hi * 1.08}
	}
	return scale{log: true, lo: math.Pow(10, math.Floor(math.Log10(lo/1.2))), hi: hi * 1.3}
}

func (b *bench) chart() string {
	var body strings.Builder
	y := 84.0
	w := func(format string, a ...any) { fmt.Fprintf(&body, format, a...) }
	for _, s := range b.sections {
		if !s.chart {
			continue
		}
		var vals []float64
		for _, r := range s.rows {
			for i := range r.m {
				if i == s.chartCol || s.id == "memory" {
					vals = append(vals, r.m[i].vals...)
				}
			}
		}
		for _, t := range s.targets {
			vals = append(vals, t.value)
		}
		sc := newScale(vals, s.logScale)
		title := s.title
		col := s.cols[s.chartCol]
		if len(s.cols) > 1 && s.id != "memory" {
			title += " — " + col
		}
		unit := s.unit
		if sc.log {
			unit += ", log scale"
		}
		if s.id == "memory" {
			unit += "; bar RSS, dark inner bar PSS"
		}
		w(`<text x="10" y="%.0f" class="t">%s <tspan class="u">(%s, lower is better)</tspan></text>`+"\n", y, html.EscapeString(title), html.EscapeString(unit))
		y += 10
		top := y
		h := float64(len(s.rows)) * rowH
		for _, t := range sc.ticks() {
			x := sc.x(t)
			w(`<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" class="g"/>`+"\n", x, top, x, top+h)
			w(`<text x="%.1f" y="%.0f" class="k">%s</text>`+"\n", x, top+h+12, num(t))
		}
		for _, r := range s.rows {
			cy := y + rowH/2
			cls := "l"
			color := peerCol
			if r.pod1 {
				cls, color = "l p", pod1Col
			}
			w(`<text x="%d" y="%.1f" class="%s">%s</text>`+"\n", labelW, cy+4, cls, html.EscapeString(r.name))
			m := &r.m[s.chartCol]
			if len(m.vals) == 0 {
				note := r.note
				if note == "" && r.lastErr != nil {
					note = "failed"
				}
				if len(note) > 70 {
					note = note[:67] + "…"
				}
				w(`<text x="%d" y="%.1f" class="n">%s</text>`+"\n", barX+4, cy+4, html.EscapeString(note))
				y += rowH
				continue
			}
			med := m.median()
			x := sc.x(med)
			w(`<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n", barX, y+3, math.Max(1, x-barX), rowH-6, color)
			if s.id == "memory" && len(r.m) > 1 && len(r.m[1].vals) > 0 {
				px := sc.x(r.m[1].median())
				w(`<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n", barX, y+8, math.Max(1, px-barX), rowH-16, pssCol)
			}
			if len(m.vals) > 1 {
				x1, x2 := sc.x(m.min()), sc.x(m.max())
				w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="w"/>`+"\n", x1, cy, x2, cy)
				w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="w"/>`+"\n", x1, cy-4, x1, cy+4)
				w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="w"/>`+"\n", x2, cy-4, x2, cy+4)
			}
			label := num(med) + " " + s.unit
			if s.id == "memory" && len(r.m) > 1 {
				label = fmt.Sprintf("%s / %s MiB", num(med), num(r.m[1].median()))
			}
			if base := s.baseFor(r); base != nil {
				label += "  (" + ratio(med, base.m[s.chartCol].median()) + " pod1)"
			}
			lx := math.Max(x, sc.x(m.max())) + 6
			w(`<text x="%.1f" y="%.1f" class="v">%s</text>`+"\n", lx, cy+4, html.EscapeString(label))
			y += rowH
		}
		for i, t := range s.targets {
			if t.value <= 0 || math.IsNaN(t.value) {
				continue
			}
			x := sc.x(t.value)
			w(`<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" class="tl"/>`+"\n", x, top-2, x, y+16+float64(i)*12)
			w(`<text x="%.1f" y="%.0f" class="tt">%s</text>`+"\n", x+3, y+24+float64(i)*12, html.EscapeString(t.label))
		}
		y += 14 + panelGap + 12*float64(len(s.targets))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`+"\n", svgW, y, svgW, y)
	sb.WriteString(`<style>
.t{font-size:15px;font-weight:bold;fill:#212529}.u{font-weight:normal;font-size:12px;fill:#495057}
.l{font-size:12.5px;text-anchor:end;fill:#343a40}.p{font-weight:bold;fill:#c2410c}
.v{font-size:12px;fill:#212529}.k{font-size:10px;text-anchor:middle;fill:#868e96}
.n{font-size:12px;font-style:italic;fill:#868e96}.g{stroke:#e9ecef;stroke-width:1}
.w{stroke:#212529;stroke-width:1.2}
.tl{stroke:#c92a2a;stroke-width:1.3;stroke-dasharray:5,3}.tt{font-size:10.5px;fill:#c92a2a}
</style>
<rect width="100%" height="100%" fill="white"/>
`)
	fmt.Fprintf(&sb, `<text x="10" y="24" style="font-size:19px;font-weight:bold;fill:#212529">pod1 beside its peers</text>`+"\n")
	fmt.Fprintf(&sb, `<text x="10" y="42" style="font-size:12px;fill:#495057">%s</text>`+"\n",
		html.EscapeString("Bars: median; whiskers: min–max; one run of make bench, interleaved rounds; orange = pod1; (n×) = the peer's median ÷ pod1's."))
	fmt.Fprintf(&sb, `<text x="10" y="58" style="font-size:11px;fill:#868e96">%s</text>`+"\n", html.EscapeString(machine()+"; "+time.Now().UTC().Format("2006-01-02")))
	sb.WriteString(body.String())
	sb.WriteString("</svg>\n")
	return sb.String()
}
