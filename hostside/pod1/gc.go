package main

import (
	"errors"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/gc"
	"github.com/pod1/pod1/hostside/launch"
)

const gcUsage = `usage: pod1 gc [--grace-period=30m] [--expire-prepared=24h] [--mark-only] [--local-config=DIR]

Collects pods as rkt gc does: exited pods move to exited-garbage/ and are
removed once their grace period is over (after their stage1's gc
entrypoint ran and everything mounted under them was unmounted); aborted
prepares and prepared pods older than --expire-prepared are removed. Pods
whose lock is held are never touched. A pod that cannot be cleaned is
reported and kept for the next run, and the exit code is then 254.

flags:`

// faultEnv names a step at which `pod1 gc` kills itself with SIGKILL, for
// the tests that prove a collection killed anywhere resumes cleanly.
const faultEnv = "POD1_TEST_GC_KILL_AT"

// cmdGC implements `pod1 gc` (rkt/gc.go).
func cmdGC(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	o := gc.Options{Out: stdout}
	fs := newFlagSet("gc")
	g.register(fs)
	fs.DurationVar(&o.GracePeriod, "grace-period", gc.DefaultGracePeriod, "how long exited pods stay in exited-garbage before removal")
	fs.DurationVar(&o.ExpirePrepared, "expire-prepared", gc.DefaultExpirePrepared, "age at which prepared pods become garbage")
	fs.BoolVar(&o.MarkOnly, "mark-only", false, "only move exited and aborted pods to the garbage directories")
	fs.StringVar(&o.LocalConfig, "local-config", launch.DefaultLocalConfig, "passed to stage1 gc entrypoints (interface version 5 and later)")
	if code, done := parseCommand(fs, args, gcUsage, stdout, stderr, "pod1 gc"); done {
		return code
	}
	if fs.NArg() != 0 {
		fail(stderr, "pod1 gc", errors.New("takes no arguments"))
		return exitError
	}
	o.Dir, o.Debug = g.dir, g.debug
	if at := os.Getenv(faultEnv); at != "" {
		o.Step = func(s gc.Step, _ string) {
			if string(s) == at {
				_ = unix.Kill(os.Getpid(), unix.SIGKILL)
			}
		}
	}
	res, err := gc.Run(o)
	if err != nil {
		fail(stderr, "pod1 gc", err)
		return exitError
	}
	if len(res.Failed) == 0 {
		return 0
	}
	uuids := make([]string, 0, len(res.Failed))
	for u := range res.Failed {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	for _, u := range uuids {
		fail(stderr, "pod1 gc", res.Failed[u])
	}
	return exitError
}
