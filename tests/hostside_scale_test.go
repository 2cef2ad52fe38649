package tests

import (
	"strings"
	"testing"
	"time"
)

// scalePods is how many exited pods the timing test makes.
const scalePods = 1000

// pod1 list and pod1 gc over a thousand exited pods: correct, and timed
// (go test -v -run Scale ./tests prints the times). The bounds only catch
// a pathological regression; the times themselves go in the notes.
func TestHostsideScaleListAndGC(t *testing.T) {
	data := t.TempDir()
	t0 := time.Now()
	for i := 0; i < scalePods; i++ {
		fakePod(t, data, "run", map[string]int{"app": i % 3}, true)
	}
	t.Logf("made %d exited pods in %v", scalePods, time.Since(t0))

	t0 = time.Now()
	out, errOut, code := pod1(t, data, "list")
	list := time.Since(t0)
	if code != 0 || errOut != "" || strings.Count(out, "\n") != scalePods+1 || strings.Count(out, "\texited\t") != scalePods {
		t.Fatalf("list: %d %q (%d lines)", code, errOut, strings.Count(out, "\n"))
	}
	t0 = time.Now()
	out, _, code = pod1(t, data, "list", "--format=json")
	listJSON := time.Since(t0)
	var all []statusJSON
	jsonOf(t, out, &all)
	if code != 0 || len(all) != scalePods || all[0].State != "exited" || all[0].Apps[0].ExitCode == nil {
		t.Fatalf("list --format=json: %d, %d pods", code, len(all))
	}
	t0 = time.Now()
	_, errOut, code = pod1(t, data, "gc", "--grace-period=0s")
	gc := time.Since(t0)
	if code != 0 {
		t.Fatalf("gc: %d %s", code, errOut)
	}
	if d := podDirs(t, data); len(d) != 0 {
		t.Fatalf("%d pods left", len(d))
	}
	t.Logf("%d pods: pod1 list %v, pod1 list --format=json %v, pod1 gc (mark, stage1 gc entrypoint per pod, removal) %v",
		scalePods, list, listJSON, gc)
	if list > 5*time.Second || gc > 90*time.Second {
		t.Errorf("too slow: list %v, gc %v", list, gc)
	}
}
