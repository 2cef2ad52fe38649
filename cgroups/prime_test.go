package cgroups

import (
	"os"
	"testing"
)

// Prime takes the kernel's move path (a write to cgroup.procs) and leaves
// the caller where it was, in every hierarchy.
func TestPrimeMovesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("writing cgroup.procs needs root")
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if err := Prime(); err != nil {
		t.Fatalf("Prime: %v", err)
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Fatalf("Prime moved the caller:\n%s\nto\n%s", before, after)
	}
}
