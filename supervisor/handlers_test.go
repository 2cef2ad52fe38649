package supervisor

import (
	"slices"
	"testing"

	"github.com/pod1/pod1/podplan"
)

func handlerApp() podplan.App {
	cfg := appCfg("a", podplan.RestartNever)
	cfg.PreStart, cfg.PostStop = []string{"/pre"}, []string{"/post"}
	return cfg
}

// A run with eventHandlers: pre-start, then the app, then post-stop, each
// a process of its own; the app's code is the run's, whatever post-stop
// ends with.
func TestHandlersRunInOrder(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, handlerApp())
	a := s.apps[0]
	var phases []Phase
	s.Fire(a, Start, nil)
	phases = append(phases, a.Phase())
	s.Exit(a, exit0, f.now) // pre-start succeeded
	phases = append(phases, a.Phase())
	if a.state != Running {
		t.Fatalf("after pre-start: %v", a.state)
	}
	s.Exit(a, exit1, f.now) // the app failed
	phases = append(phases, a.Phase())
	if a.state != Running {
		t.Fatalf("after the app: %v, want Running (post-stop)", a.state)
	}
	s.Exit(a, exit0, f.now) // post-stop
	if want := []Phase{PhasePreStart, PhaseMain, PhasePostStop}; !slices.Equal(phases, want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	if a.state != Exited || f.statuses["a"] != 1 || s.Code() != 1 {
		t.Fatalf("state %v, status %d, pod %d: want Exited with the app's 1", a.state, f.statuses["a"], s.Code())
	}
	if n := countStarts(f); n != 3 {
		t.Fatalf("%d process starts, want 3", n)
	}
}

// A failed pre-start: the app never runs, the run ends with the handler's
// code, and post-stop still runs.
func TestPreStartFailure(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, handlerApp())
	a := s.apps[0]
	s.Fire(a, Start, nil)
	s.Exit(a, exit1, f.now)
	if a.state != Running || a.Phase() != PhasePostStop {
		t.Fatalf("after a failed pre-start: %v %v, want the post-stop handler running", a.state, a.Phase())
	}
	s.Exit(a, exit0, f.now)
	if a.state != Exited || f.statuses["a"] != 1 || countStarts(f) != 2 {
		t.Fatalf("state %v, status %d, starts %d: want Exited with the handler's 1, 2 starts", a.state, f.statuses["a"], countStarts(f))
	}
}

// A stop while the post-stop handler runs is not waited on beyond the
// grace period: the handler of a stopped app runs as Stopping.
func TestPostStopOfStoppedApp(t *testing.T) {
	f := newFakeOS(t)
	s := newPod(f, false, handlerApp())
	a := s.apps[0]
	s.Fire(a, Start, nil)
	s.Exit(a, exit0, f.now)
	s.StopPod("test", false)
	s.Exit(a, sigterm, f.now)
	if a.state != Stopping || a.Phase() != PhasePostStop {
		t.Fatalf("after the stop: %v %v, want the post-stop handler, Stopping", a.state, a.Phase())
	}
	f.advance(a.Cfg.Supervision.Grace)
	s.Tick()
	if a.state != Killing {
		t.Fatalf("at the grace period's end: %v, want Killing", a.state)
	}
	s.Exit(a, sigkill, f.now)
	if a.state != Exited || f.statuses["a"] != 143 {
		t.Fatalf("state %v, status %d: want Exited with the app's 143", a.state, f.statuses["a"])
	}
}

func countStarts(f *fakeOS) int {
	n := 0
	for _, c := range f.calls {
		if len(c) > 6 && c[:6] == "start " {
			n++
		}
	}
	return n
}
