package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// Every pod leaves its emptied cgroups for gc, as rkt's stage1 does, so a
// test that runs a pod and collects nothing leaves cgroups on the host.
// The run of the package fails when it left any, naming them.

// podCgroupsOnHost lists the cgroup directories of pods (pod1-<uuid>) in
// every hierarchy, at any depth.
func podCgroupsOnHost() []string {
	dirs, err := cgroups.Find(func(name string) bool {
		u, ok := strings.CutPrefix(name, "pod1-")
		return ok && len(u) == 36 && strings.Count(u, "-") == 4
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests: looking for pod cgroups: %v\n", err)
	}
	return dirs
}

// runCheckingCgroups runs the tests and fails the run if it left pod
// cgroups that were not there before, which it then removes (they hold
// nothing: each pod's run emptied them).
func runCheckingCgroups(m *testing.M) int {
	before := podCgroupsOnHost()
	code := m.Run()
	var left []string
	for _, d := range podCgroupsOnHost() {
		if !slices.Contains(before, d) {
			left = append(left, d)
		}
	}
	if len(left) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "tests: the run left %d pod cgroups no gc removed: %s\n", len(left), strings.Join(left, " "))
	for _, d := range left {
		if err := (&cgroups.Group{V2: d}).RemoveTree(); err != nil {
			fmt.Fprintf(os.Stderr, "tests: %v\n", err)
		}
	}
	return 1
}

// gcPodCgroupsUnder removes the cgroups of every pod under the rkt data
// directory data (pods/<state>/<uuid>), as the gc entry point does: the
// cleanup of a test whose pods pod1 run started and nothing collected.
func gcPodCgroupsUnder(t *testing.T, data string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(data, "pods", "*", "*"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, layout.CgroupsFile)); err != nil {
			continue
		}
		if err := cgroups.RemovePod(d, filepath.Base(d)); err != nil {
			t.Errorf("remove the cgroups of the pod in %s: %v", d, err)
		}
	}
}
