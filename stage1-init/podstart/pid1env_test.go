package podstart

import (
	"slices"
	"testing"
)

// PID 1 runs with the runtime's asynchronous preemption off, and a
// GODEBUG setting of the caller's is kept and still wins (it comes last).
func TestPID1EnvTurnsAsyncPreemptionOff(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=asyncpreemptoff=1"}},
		{[]string{"GODEBUG=inittrace=1", "A=b"}, []string{"GODEBUG=asyncpreemptoff=1,inittrace=1", "A=b"}},
		{[]string{"GODEBUG="}, []string{"GODEBUG=asyncpreemptoff=1"}},
		{nil, []string{"GODEBUG=asyncpreemptoff=1"}},
	} {
		if got := pid1Env(c.in); !slices.Equal(got, c.want) {
			t.Errorf("pid1Env(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
