package tests

import (
	"strings"
	"testing"
	"time"
)

// scalePods is how many exited pods the timing test makes.
const scalePods = 1000

// pod1 list and pod1 gc over a thousand exited pods: correct, and timed
// (go test -v -run Scale ./tests prints the times). The bound only catches
// a pathological regression, and does so whatever the machine's speed: the
// same commands over a tenth of the pods are the yardstick, and work that
// grows faster than the number of pods (a quadratic scan) shows as a
// ratio near a hundred, where linear work is ten; fifty leaves room for
// the noise of a loaded machine.
func TestHostsideScaleListAndGC(t *testing.T) {
	listSmall, gcSmall := scaleListAndGC(t, scalePods/10)
	list, gc := scaleListAndGC(t, scalePods)
	if list > 50*listSmall || gc > 50*gcSmall {
		t.Errorf("grows faster than the pods: %d pods list %v, gc %v; %d pods list %v, gc %v",
			scalePods/10, listSmall, gcSmall, scalePods, list, gc)
	}
}

func scaleListAndGC(t *testing.T, n int) (list, gc time.Duration) {
	t.Helper()
	data := t.TempDir()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		fakePod(t, data, "run", map[string]int{"app": i % 3}, true)
	}
	t.Logf("made %d exited pods in %v", n, time.Since(t0))

	// Deadlines that grow with the work: a hang still fails, a slow
	// machine does not.
	within := time.Duration(n/100+1) * eventDeadline
	t0 = time.Now()
	out, errOut, code := pod1Within(t, within, data, "list")
	list = time.Since(t0)
	if code != 0 || errOut != "" || strings.Count(out, "\n") != n+1 || strings.Count(out, "\texited\t") != n {
		t.Fatalf("list: %d %q (%d lines)", code, errOut, strings.Count(out, "\n"))
	}
	t0 = time.Now()
	out, _, code = pod1Within(t, within, data, "list", "--format=json")
	listJSON := time.Since(t0)
	var all []statusJSON
	jsonOf(t, out, &all)
	if code != 0 || len(all) != n || all[0].State != "exited" || all[0].Apps[0].ExitCode == nil {
		t.Fatalf("list --format=json: %d, %d pods", code, len(all))
	}
	t0 = time.Now()
	_, errOut, code = pod1Within(t, within, data, "gc", "--grace-period=0s")
	gc = time.Since(t0)
	if code != 0 {
		t.Fatalf("gc: %d %s", code, errOut)
	}
	if d := podDirs(t, data); len(d) != 0 {
		t.Fatalf("%d pods left", len(d))
	}
	t.Logf("%d pods: pod1 list %v, pod1 list --format=json %v, pod1 gc (mark, stage1 gc entrypoint per pod, removal) %v",
		n, list, listJSON, gc)
	return list, gc
}
