// Package starttricks owns the stage1's start-latency tricks: it lists
// each one by name, all on by default, and is the one place that says
// whether one is on in this process. A trick is something the stage1 does
// only to start, stop or sit in memory faster or smaller; none of them
// changes what a pod does or what it may reach, so each can be turned off
// for a pod, to measure what it buys (`make bench-ab`) or to rule it out
// when a pod misbehaves. Security measures are not tricks and have no
// switch.
//
// The run entry point reads Env once: the C waiter (waiter/waiter.c, with
// the names of tricks.h, which TestCHeader keeps equal to this list) for
// the tricks it does, the Go run for the rest. The Go run removes Env from
// its own environment and hands the set on to the processes it starts,
// PID 1 as an argument (Arg) and the lock keeper as its only environment
// variable: nothing later reads it from an environment anybody else could
// set. docs/design-start.md says what each trick buys.
package starttricks

import (
	"fmt"
	"os"
	"strings"
)

// Env is the variable naming the tricks turned off for a pod: names
// separated by commas, none by default.
const Env = "POD1_TRICKS_OFF"

// Trick is one start-latency trick.
type Trick uint

// The tricks. Their order is the C header's (tricks.h); a new one is
// added at the end of the list, with its row in tricks.
const (
	// Shed: PID 1, the waiter and the lock keeper drop their binary's
	// pages once the pod is up (stage1-init/pid1/footprint.go, waiter.c's
	// shed).
	Shed Trick = iota
	// Prime: the waiter writes to its own cgroup.procs while the Go run
	// starts, so that the pod's moves into cgroups do not wait for an
	// RCU grace period (waiter.c's prime).
	Prime
	// FDTable: the binary a child executes through /proc/self/fd is
	// kept below the descriptor table's first size
	// (stage1-init/selfexe/execfd.go).
	FDTable
	// Commit: PID 1 leaves the last statuses for the lock keeper to make
	// durable, rather than fsyncing them itself before its exit.
	Commit
	// Spare: PID 1 forks the first app's set-up process before it reads
	// its configuration, briefs it with the app's spec as soon as it has
	// it, and moves it into the app's cgroup then
	// (stage1-init/pid1/spare.go).
	Spare
	count
)

// names are the tricks' names, by Trick.
var names = [count]string{
	Shed:    "shed",
	Prime:   "prime",
	FDTable: "fdtable",
	Commit:  "commit",
	Spare:   "spare",
}

// All lists every trick, in order.
func All() []Trick {
	out := make([]Trick, count)
	for i := range out {
		out[i] = Trick(i)
	}
	return out
}

// Name is the trick's name, as Env spells it.
func (t Trick) Name() string {
	if t >= count {
		return fmt.Sprintf("trick%d", uint(t))
	}
	return names[t]
}

// Set is a set of tricks turned off; the zero Set has every trick on.
type Set uint32

// Parse reads Env's value: names separated by commas (spaces around a
// name and empty names are ignored). An unknown name is an error that
// names it.
func Parse(v string) (Set, error) {
	var s Set
	for _, n := range strings.Split(v, ",") {
		n = strings.Trim(n, " ")
		if n == "" {
			continue
		}
		t, ok := lookup(n)
		if !ok {
			return 0, fmt.Errorf("%s: unknown trick %q (known: %s)", Env, n, strings.Join(names[:], ", "))
		}
		s |= 1 << t
	}
	return s, nil
}

func lookup(n string) (Trick, bool) {
	for i, name := range names {
		if name == n {
			return Trick(i), true
		}
	}
	return 0, false
}

// TakeEnv is the run entry point's: it reads Env, once, uses its set
// (Use) and removes Env from this process's environment, which the
// processes it starts would inherit: they get the set from it (Args,
// Environ). It returns what its caller says with --debug.
func TakeEnv() (string, error) {
	v := os.Getenv(Env)
	_ = os.Unsetenv(Env)
	s, err := Parse(v)
	if err != nil {
		return "", err
	}
	Use(s)
	if s == 0 {
		return "start-latency tricks: all on", nil
	}
	return fmt.Sprintf("start-latency tricks off (%s): %s", Env, s), nil
}

// UseArgs is PID 1's: it uses the set an argument of args carries (Args).
func UseArgs(args []string) error {
	s, err := FromArgs(args)
	Use(s)
	return err
}

// Args are the arguments that hand this process's set to PID 1: none
// when every trick is on.
func Args() []string {
	if a := Arg(off); a != "" {
		return []string{a}
	}
	return nil
}

// Environ is the environment that hands s to the lock keeper, its only
// variable: empty when every trick is on.
func Environ(s Set) []string {
	if s == 0 {
		return []string{}
	}
	return []string{Env + "=" + s.String()}
}

// Off reports whether t is turned off in s.
func (s Set) Off(t Trick) bool { return s&(1<<t) != 0 }

// String lists the tricks turned off, in order, separated by commas, as
// Parse reads them; "" when every trick is on.
func (s Set) String() string {
	var out []string
	for _, t := range All() {
		if s.Off(t) {
			out = append(out, t.Name())
		}
	}
	return strings.Join(out, ",")
}

// off is this process's set, as Use set it.
var off Set

// Use sets this process's set, once, before anything consults it: the
// entry point that received it calls it first thing.
func Use(s Set) { off = s }

// Current is this process's set.
func Current() Set { return off }

// On reports whether the trick t is on in this process.
func On(t Trick) bool { return !off.Off(t) }

// argPrefix starts the argument that hands a set to PID 1 (Arg, FromArgs):
// an argument, not a field of the configuration, so that PID 1 has its
// set before anything it does: the spare is forked before it reads its
// configuration.
const argPrefix = "--tricks-off="

// Arg returns the argument carrying s, or "" when every trick is on.
func Arg(s Set) string {
	if s == 0 {
		return ""
	}
	return argPrefix + s.String()
}

// FromArgs returns the set an argument of args carries (Arg), the zero
// Set when none does.
func FromArgs(args []string) (Set, error) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, argPrefix); ok {
			return Parse(v)
		}
	}
	return 0, nil
}

// CHeader is waiter/tricks.h: the names and their bits, for the C
// waiter and lock keeper, which read Env themselves.
func CHeader() string {
	var b strings.Builder
	b.WriteString("/* Generated from package starttricks (go test ./starttricks -update):\n" +
		" * the start-latency tricks by name, in the Go list's order. Do not edit. */\n")
	b.WriteString("#define TRICKS_ENV \"" + Env + "\"\n")
	for _, t := range All() {
		fmt.Fprintf(&b, "#define TRICK_%s %d\n", cName(t), uint(t))
	}
	fmt.Fprintf(&b, "#define TRICK_COUNT %d\n", uint(count))
	b.WriteString("static const char *const trick_names[TRICK_COUNT] = {\n")
	for _, t := range All() {
		fmt.Fprintf(&b, "\t\"%s\",\n", t.Name())
	}
	b.WriteString("};\n")
	return b.String()
}

func cName(t Trick) string {
	return strings.ToUpper(strings.ReplaceAll(t.Name(), "-", "_"))
}
