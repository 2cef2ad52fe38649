package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Prime takes the kernel's move path (a write to cgroup.procs) and leaves
// the caller where it was, in every hierarchy. The test runs it from a
// cgroup of its own, below the one it was in: from a hierarchy's root, a
// write to the wrong cgroup.procs (the root's) would move nothing either.
func TestPrimeMovesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("writing cgroup.procs needs root")
	}
	self, err := Current()
	if err != nil {
		t.Skip(err)
	}
	dir := self.dirs()[0]
	own := filepath.Join(dir, fmt.Sprintf("pod1-prime-test-%d", os.Getpid()))
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	t.Cleanup(func() {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), pid); err != nil {
			t.Errorf("move back: %v", err)
		}
		if err := os.Remove(own); err != nil {
			t.Errorf("remove %s: %v", own, err)
		}
	})
	if err := writeFile(filepath.Join(own, "cgroup.procs"), pid); err != nil {
		t.Fatal(err)
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
