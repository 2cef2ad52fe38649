package cgroups

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// readFile reads a file whole whatever its size (a process list can pass
// its first buffer), and says what a missing file is.
func TestReadFileWhole(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 511, 512, 513, 5000} {
		want := bytes.Repeat([]byte("7\n"), n)
		p := filepath.Join(dir, "procs")
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d bytes: read %d bytes, %v", len(want), len(got), err)
		}
	}
	if _, err := readFile(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want not-exist", err)
	}
}
