package cgroups

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSharesToWeight(t *testing.T) {
	// systemd's map for CPUShares= on a unified host: the default
	// shares are the default weight.
	for shares, want := range map[int64]int64{2: 1, 1024: 100, 512: 50, 2048: 200, 102400: 10000, 262144: 10000, 1: 1} {
		if got := SharesToWeight(shares); got != want {
			t.Errorf("%d shares: weight %d, want %d", shares, got, want)
		}
	}
}

// The limits land in the v1 files of a hybrid layout and in the v2 files
// of a unified one (plain directories stand in for the hierarchies).
func TestSetLimitsFiles(t *testing.T) {
	l := Limits{MemoryMax: 64 << 20, CPUMilli: 250, CPUShares: 512}
	v1 := t.TempDir()
	for _, c := range []string{"memory", "cpu"} {
		must(t, os.Mkdir(filepath.Join(v1, c), 0o755))
	}
	// cgroupfs has the files already: SetLimits writes them with mode 0,
	// which in a plain directory only root could read back.
	for _, f := range []string{"memory/memory.limit_in_bytes", "cpu/cpu.cfs_period_us", "cpu/cpu.cfs_quota_us", "cpu/cpu.shares"} {
		must(t, os.WriteFile(filepath.Join(v1, f), nil, 0o644))
	}
	g := &Group{V1: map[string]string{"memory": filepath.Join(v1, "memory"), "cpu": filepath.Join(v1, "cpu")}}
	must(t, g.SetLimits(l))
	for f, want := range map[string]string{
		"memory/memory.limit_in_bytes": "67108864", "cpu/cpu.cfs_period_us": "100000",
		"cpu/cpu.cfs_quota_us": "25000", "cpu/cpu.shares": "512",
	} {
		if b, _ := os.ReadFile(filepath.Join(v1, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	v2 := t.TempDir()
	for _, f := range []string{"memory.max", "cpu.max", "cpu.weight"} {
		must(t, os.WriteFile(filepath.Join(v2, f), nil, 0o644))
	}
	u := &Group{V2: v2, Unified: true}
	must(t, u.SetLimits(l))
	for f, want := range map[string]string{"memory.max": "67108864", "cpu.max": "25000 100000", "cpu.weight": "50"} {
		if b, _ := os.ReadFile(filepath.Join(v2, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	none := &Group{V2: v2}
	if err := none.SetLimits(Limits{MemoryMax: 1 << 30}); err == nil || !strings.Contains(err.Error(), "no memory controller") {
		t.Errorf("no controller: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
