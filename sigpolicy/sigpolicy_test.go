package sigpolicy

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestTable(t *testing.T) {
	tab := Table()
	want := map[unix.Signal]Action{
		unix.SIGHUP: Stop, unix.SIGINT: Stop, unix.SIGTERM: Stop, SigPoweroff: Stop,
		unix.SIGQUIT: ForceStop, unix.SIGUSR1: ForceStop,
		unix.SIGKILL: Uncatchable, unix.SIGSTOP: Uncatchable,
		unix.SIGCHLD: Runtime, unix.SIGURG: Runtime, unix.SIGPROF: Runtime, 33: Runtime,
		unix.SIGSEGV: Ignore, unix.SIGABRT: Ignore, unix.SIGPIPE: Ignore, unix.SIGTTOU: Ignore, 32: Ignore, 34: Ignore, 64: Ignore,
	}
	for s, a := range want {
		if tab[s] != a {
			t.Errorf("signal %d: %v, want %v", s, tab[s], a)
		}
	}
	if Forward(Stop) != unix.SIGTERM || Forward(ForceStop) != unix.SIGUSR1 {
		t.Error("forwarded signals")
	}
	if Request(false) != Stop || Request(true) != ForceStop {
		t.Error("stop and stop --force requests")
	}
	// What run forwards means the same to PID 1.
	for _, a := range []Action{Stop, ForceStop} {
		if Of(Forward(a)) != a {
			t.Errorf("%v is forwarded as %v, which means %v", a, Forward(a), Of(Forward(a)))
		}
	}
}

// A request only rises, and every raise wakes the reader at most once
// per read.
func TestRequestsOnlyRise(t *testing.T) {
	r := &Requests{c: make(chan struct{}, 1)}
	r.C = r.c
	if r.Level() != Ignore {
		t.Fatal("a new request is not empty")
	}
	r.Raise(ForceStop, "forced")
	r.Raise(Stop, "graceful")
	r.Raise(Stop, "graceful")
	if r.Level() != ForceStop || r.Why() != "forced" {
		t.Fatalf("level %v (%q), want the forced stop to stay", r.Level(), r.Why())
	}
	<-r.C
	select {
	case <-r.C:
		t.Fatal("a burst woke the reader twice")
	default:
	}
}
