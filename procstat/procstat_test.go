package procstat

import (
	"os"
	"testing"
	"time"
)

// A command name with spaces and parentheses does not shift the fields;
// what is not a stat is refused.
func TestParse(t *testing.T) {
	st, ok := Parse([]byte("42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1 0 0"))
	if !ok || st[0] != "S" {
		t.Fatalf("Parse = %q, %v", st, ok)
	}
	if ppid, ok := st.PPid(); !ok || ppid != 1 {
		t.Errorf("PPid = %d, %v; want 1", ppid, ok)
	}
	if d, ok := st.CPU(); !ok || d != 3250*time.Millisecond {
		t.Errorf("CPU = %v, %v; want 3.25s", d, ok)
	}
	for _, bad := range []string{"", "42 (a", "42 (a) S"} {
		if st, ok := Parse([]byte(bad)); ok {
			t.Errorf("Parse(%q) = %q, want refused", bad, st)
		}
	}
	for _, bad := range []string{"42 (a) S 1 2 3", "42 (a) S 1 42 42 0 -1 4194560 100 0 0 0 x 75"} {
		st, _ := Parse([]byte(bad))
		if d, ok := st.CPU(); ok {
			t.Errorf("CPU of %q = %v, want refused", bad, d)
		}
	}
}

// The figure of a real process grows as it works (a Go program works on
// several threads: /proc/PID/stat counts them all), and its parent is
// its parent.
func TestRead(t *testing.T) {
	cpu := func() time.Duration {
		st, ok := Read(os.Getpid())
		if !ok {
			t.Fatal("Read of this process refused")
		}
		d, ok := st.CPU()
		if !ok {
			t.Fatalf("CPU of %q refused", st)
		}
		return d
	}
	if st, ok := Read(os.Getpid()); !ok {
		t.Fatal("Read refused")
	} else if ppid, ok := st.PPid(); !ok || ppid != os.Getppid() {
		t.Errorf("PPid = %d, want %d", ppid, os.Getppid())
	}
	before := cpu()
	done := make(chan time.Duration)
	go func() {
		t0 := time.Now()
		for cpu()-before < 50*time.Millisecond && time.Since(t0) < 10*time.Second {
		}
		done <- time.Since(t0)
	}()
	if took := <-done; took >= 10*time.Second {
		t.Fatalf("10 s of work: CPU %v then %v", before, cpu())
	}
	if _, ok := Read(-1); ok {
		t.Error("Read of pid -1 accepted")
	}
}
