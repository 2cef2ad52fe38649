package pid1

import (
	"os"
	"testing"
	"time"
)

// statCPU reads the CPU time a process used, its threads' together, from
// its stat: a name with spaces and parentheses does not shift the fields,
// and the figure grows as the process works.
func TestStatCPU(t *testing.T) {
	stat := []byte("42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1 0 0")
	if d, ok := statCPU(stat); !ok || d != 3250*time.Millisecond {
		t.Fatalf("statCPU = %v, %v; want 3.25s", d, ok)
	}
	for _, bad := range []string{"", "42 (a", "42 (a) S 1 2 3", "42 (a) S 1 42 42 0 -1 4194560 100 0 0 0 x 75"} {
		if d, ok := statCPU([]byte(bad)); ok {
			t.Errorf("statCPU(%q) = %v, want refused", bad, d)
		}
	}
	read := func() time.Duration {
		b, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			t.Fatal(err)
		}
		d, ok := statCPU(b)
		if !ok {
			t.Fatalf("statCPU(%q) refused", b)
		}
		return d
	}
	before := read()
	done := make(chan time.Duration)
	go func() {
		// Spin until the figure shows 50 ms more, or 10 s have
		// passed (a Go program works on several threads: /proc/PID/stat
		// counts them all).
		t0 := time.Now()
		for read()-before < 50*time.Millisecond && time.Since(t0) < 10*time.Second {
		}
		done <- time.Since(t0)
	}()
	if took := <-done; took >= 10*time.Second {
		t.Fatalf("10 s of work: CPU %v then %v", before, read())
	}
}
