package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// Every pod leaves its emptied cgroups for gc, as rkt's stage1 does, so a
// test that runs a pod and collects nothing leaves cgroups on the host.
// The run of the package fails when it left any, naming them. It judges
// only its own pods' cgroups: another suite (a second checkout's, a
// conformance run) may run pods on the same host at the same time, and
// their cgroups come and go as they please.

// ownPods are the UUIDs of the pods this run made: the harness's own pod
// directories (newUUID) and the pods pod1 run and rkt made in this run's
// data directories (ownPodsUnder).
var ownPods = struct {
	sync.Mutex
	uuids map[string]bool
}{uuids: map[string]bool{}}

func ownPod(uuid string) {
	ownPods.Lock()
	defer ownPods.Unlock()
	ownPods.uuids[uuid] = true
}

func isOwnPod(uuid string) bool {
	ownPods.Lock()
	defer ownPods.Unlock()
	return ownPods.uuids[uuid]
}

// ownPodsUnder records the pods under the rkt data directory data
// (pods/<state>/<uuid>) as this run's, before the test's cleanup removes
// them.
func ownPodsUnder(data string) {
	dirs, _ := filepath.Glob(filepath.Join(data, "pods", "*", "*"))
	for _, d := range dirs {
		ownPod(filepath.Base(d))
	}
}

// podCgroupUUID is the UUID a pod cgroup directory is named for (by this
// stage1, cgroups.PodName, or an older one, cgroups.LegacyPodName), or "".
func podCgroupUUID(name string) string { return cgroups.PodUUID(name) }

// podCgroupsOnHost lists the cgroup directories of pods (either name) in
// every hierarchy, at any depth.
func podCgroupsOnHost() []string {
	dirs, err := cgroups.Find(func(name string) bool { return podCgroupUUID(name) != "" })
	if err != nil {
		fmt.Fprintf(os.Stderr, "tests: looking for pod cgroups: %v\n", err)
	}
	return dirs
}

// runCheckingCgroups runs the tests and fails the run if it left cgroups
// of its own pods (not there before the run, and named for a pod it
// made), which it then removes (they hold nothing: each pod's run emptied
// them). Any other pod's cgroup is left alone.
func runCheckingCgroups(m *testing.M) int {
	before := podCgroupsOnHost()
	code := m.Run()
	left := leftCgroups(before, podCgroupsOnHost())
	if len(left) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "tests: the run left %d cgroups of its pods that no gc removed: %s\n", len(left), strings.Join(left, " "))
	for _, d := range left {
		if err := (&cgroups.Group{V2: d}).RemoveTree(); err != nil {
			fmt.Fprintf(os.Stderr, "tests: %v\n", err)
		}
	}
	return 1
}

// leftCgroups are the pod cgroups of now that are this run's: not in
// before, and named for one of its pods.
func leftCgroups(before, now []string) []string {
	var left []string
	for _, d := range now {
		if !slices.Contains(before, d) && isOwnPod(podCgroupUUID(filepath.Base(d))) {
			left = append(left, d)
		}
	}
	return left
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

// podCgroup is the pod's cgroup as run saved it for gc
// (layout.CgroupsFile).
func podCgroup(t *testing.T, p *Pod) *cgroups.Group {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Dir, layout.CgroupsFile))
	must(t, err)
	var g cgroups.Group
	must(t, json.Unmarshal(b, &g))
	return &g
}
