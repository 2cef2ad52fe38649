package cgroups

import (
	"slices"
	"testing"
)

// A group saved by an older stage1 (gc reads it from cgroups.json) may
// name v1 hierarchies this one no longer creates groups in: they are
// still among its directories, so gc removes them too.
func TestDirsKeepsHierarchiesNoLongerUsed(t *testing.T) {
	g := &Group{V2: "/u/p", V1: map[string]string{"freezer": "/f/p", "memory": "/m/p", "pids": "/p/p", "blkio": "/b/p"}}
	want := []string{"/u/p", "/p/p", "/m/p", "/b/p", "/f/p"}
	if got := g.dirs(); !slices.Equal(got, want) {
		t.Fatalf("dirs() = %v, want %v", got, want)
	}
}
