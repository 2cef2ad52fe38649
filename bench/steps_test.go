package main

import (
	"math"
	"strings"
	"testing"
)

func TestStepsTarget(t *testing.T) {
	b := &bench{abDir: "/ab"}
	fig := map[string]float64{
		stepRow("c74bc7d"): 67, stepRow("c3bba14"): 65.6,
		stepRow("5b07088"): 92.1, stepRow("eb07fd0"): 88.8,
		"pod1 stage1": 79.1,
	}
	med := func(sec, name string, col int) float64 {
		if v, ok := fig[name]; ok && sec == "start" && col == 0 {
			return v
		}
		return math.NaN()
	}
	m, met := b.stepsTarget(med)
	if met != "met" {
		t.Fatalf("every step no worse: %q (%s)", met, m)
	}
	// What other issues' work cost between the steps is shown, not judged.
	if !strings.Contains(m, "between the steps (other issues' work): c3bba14 → 5b07088 65.6 → 92.1 ms (1.40×)") {
		t.Fatalf("the time between the steps is not shown: %s", m)
	}
	// Within the noise between rows of the same binaries: no worse.
	fig[stepRow("c3bba14")] = 67 * (1 + stepNoise/2)
	if _, met := b.stepsTarget(med); met != "met" {
		t.Fatalf("a step within the noise: %q", met)
	}
	fig[stepRow("c3bba14")] = 67 * (1 + 2*stepNoise)
	if _, met := b.stepsTarget(med); met != "**no**" {
		t.Fatalf("a step beyond the noise: %q", met)
	}
	fig[stepRow("c3bba14")] = 65.6
	fig["pod1 stage1"] = 95
	if _, met := b.stepsTarget(med); met != "**no**" {
		t.Fatalf("the last step worse: %q", met)
	}
	delete(fig, stepRow("5b07088"))
	if _, met := b.stepsTarget(med); !strings.HasPrefix(met, "not measured (the supervisor package") || !strings.Contains(met, "make bench-ab") {
		t.Fatalf("a tree missing: %q", met)
	}
}
