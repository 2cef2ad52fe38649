package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/pod1/pod1/hostside/pods"
)

const statusUsage = `usage: pod1 status [--format=json|json-pretty] [--wait[=DURATION]] [--wait-ready[=DURATION]] UUID

Prints the pod's state, times, pid and the exit code of every app that has
one, as rkt status does. UUID may be a unique prefix. --wait waits for the
pod to finish, --wait-ready for its supervisor to be ready; with a duration
they give up after it (exit 254), with none (or true) they wait forever.

flags:`

// cmdStatus implements `pod1 status` (rkt/status.go).
func cmdStatus(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	var format outputFormat
	wait, waitReady := waitFlag{}, waitFlag{}
	fs := newFlagSet("status")
	g.register(fs)
	fs.Var(&format, "format", "output format: json or json-pretty (default key=value lines)")
	fs.Var(&wait, "wait", "wait for the pod to finish: true, false or a duration")
	fs.Var(&waitReady, "wait-ready", "wait for the pod to be ready: true, false or a duration")
	if code, done := parseCommand(fs, args, statusUsage, stdout, stderr, "pod1 status"); done {
		return code
	}
	if fs.NArg() != 1 {
		fail(stderr, "pod1 status", errors.New("want exactly one UUID"))
		return exitError
	}
	uuid, err := pods.Resolve(g.dir, fs.Arg(0))
	if err != nil {
		fail(stderr, "pod1 status", err)
		return exitError
	}
	if waitReady.d != 0 {
		ctx, cancel := waitReady.context()
		err := pods.WaitReady(ctx, g.dir, uuid)
		cancel()
		if err != nil {
			fail(stderr, "pod1 status", err)
			return exitError
		}
	}
	if wait.d != 0 {
		ctx, cancel := wait.context()
		_, err := pods.WaitFinished(ctx, g.dir, uuid)
		cancel()
		if err != nil {
			fail(stderr, "pod1 status", err)
			return exitError
		}
	}
	p, err := pods.Read(g.dir, uuid)
	if err != nil {
		fail(stderr, "pod1 status", err)
		return exitError
	}
	if format != "" {
		if err := writeJSON(stdout, format, toJSON(p)); err != nil {
			fail(stderr, "pod1 status", err)
			return exitError
		}
		return 0
	}
	printStatus(stdout, p)
	return 0
}

// printStatus prints rkt status's key=value lines. Where rkt iterates a
// map (the app- lines), we keep the manifest's order.
func printStatus(w io.Writer, p *pods.Pod) {
	fmt.Fprintf(w, "state=%s\n", p.State)
	// rkt prints the zero time for a pod still being prepared.
	fmt.Fprintf(w, "created=%s\n", p.Created.Format(timeLayout))
	if !p.Started.IsZero() {
		fmt.Fprintf(w, "started=%s\n", p.Started.Format(timeLayout))
	}
	if p.State == pods.Running || p.State == pods.Exited {
		fmt.Fprintf(w, "networks=%s\n", fmtNets(p.Networks))
	}
	switch p.State {
	case pods.Running, pods.Deleting, pods.ExitedDeleting, pods.Exited, pods.ExitedGarbage:
	default:
		return
	}
	// A stage1 that failed before writing its pid leaves none: the
	// line is left out (rkt #3713).
	if p.Pid > 0 {
		fmt.Fprintf(w, "pid=%d\n", p.Pid)
	}
	fmt.Fprintf(w, "exited=%t\n", p.State == pods.Exited || p.State == pods.ExitedGarbage)
	if p.State == pods.Running {
		return
	}
	for _, a := range p.Apps {
		if a.ExitCode != nil {
			fmt.Fprintf(w, "app-%s=%d\n", a.Name, *a.ExitCode)
		}
	}
}

// waitFlag is rkt's --wait / --wait-ready value: a bare flag or "true"
// waits forever, "false" not at all, a duration that long (negative:
// forever).
type waitFlag struct {
	d   time.Duration // 0: do not wait; < 0: forever
	set string
}

func (f *waitFlag) String() string   { return f.set }
func (f *waitFlag) IsBoolFlag() bool { return true }

func (f *waitFlag) Set(s string) error {
	f.set = s
	if b, err := strconv.ParseBool(s); err == nil {
		f.d = 0
		if b {
			f.d = -1
		}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: want true, false or a duration", s)
	}
	f.d = d
	if d < 0 {
		f.d = -1
	}
	return nil
}

func (f *waitFlag) context() (context.Context, context.CancelFunc) {
	if f.d > 0 {
		return context.WithTimeout(context.Background(), f.d)
	}
	return context.WithCancel(context.Background())
}
