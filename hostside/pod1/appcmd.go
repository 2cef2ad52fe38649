package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/appops"
	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/hostside/pods"
)

const appUsage = `usage: pod1 app <command> ...

Dynamic pods, as rkt's app commands (RKT_EXPERIMENT_APP):
  sandbox [run flags]                    start a mutable pod with no apps (runs until stopped)
  add UUID IMAGE [--name=N] [--exec=P] [app flags] [-- ARGS...]
                                         add an app to a running sandbox
  start UUID --app=NAME                  start (or restart) an added app
  stop UUID --app=NAME                   stop a running app (nothing to do if it is not running)
  rm UUID --app=NAME                     stop and remove an app; nothing of it is left
  list UUID                              the pod's apps (as pod1 list)
  status UUID --app=NAME                 one app's state (as pod1 status)`

// appFaultEnv names a step of add or rm at which `pod1 app` kills itself
// with SIGKILL, for the tests that prove an interrupted operation is
// recovered.
const appFaultEnv = "POD1_TEST_APPOP_KILL_AT"

// cmdApp dispatches `pod1 app <command>`.
func cmdApp(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	if at := os.Getenv(appFaultEnv); at != "" {
		appops.Step = func(s string) {
			if s == at {
				_ = unix.Kill(os.Getpid(), unix.SIGKILL)
			}
		}
	}
	// Global flags may come before the app command too (pod1 app
	// --dir=X list UUID), as rkt's persistent flags may.
	for len(args) > 0 {
		n, err := g.parseOne(args)
		if err != nil {
			fail(stderr, "pod1 app", err)
			return exitError
		}
		if n == 0 {
			break
		}
		args = args[n:]
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, appUsage)
		if len(args) == 0 {
			return exitError
		}
		return 0
	}
	switch args[0] {
	case "sandbox":
		return appSandbox(g, args[1:], stdout, stderr)
	case "add":
		return appAdd(g, args[1:], stdout, stderr)
	case "start", "stop", "rm":
		return appOp(g, args[0], args[1:], stdout, stderr)
	case "list", "status":
		return appShow(g, args[0], args[1:], stdout, stderr)
	}
	fail(stderr, "pod1 app", fmt.Errorf("unknown command %q (want sandbox, add, start, stop, rm, list or status)", args[0]))
	return exitError
}

// appSandbox is `rkt app sandbox`: pod1 run with no apps and --mutable.
func appSandbox(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	opts, err := parsePodArgs(g, args, false)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: pod1 app sandbox [run flags]")
		return 0
	}
	if err != nil {
		fail(stderr, "pod1 app sandbox", err)
		return exitError
	}
	opts.Mutable = true
	p, err := launch.Prepare(opts)
	if err != nil {
		fail(stderr, "pod1 app sandbox", err)
		return exitError
	}
	err = p.Exec()
	if aerr := launch.Abort(p); aerr != nil {
		err = fmt.Errorf("%w (undo: %w)", err, aerr)
	}
	fail(stderr, "pod1 app sandbox", err)
	return exitError
}

// findPod resolves a UUID (or unique prefix) and reads the pod.
func findPod(g *globalFlags, target string) (*pods.Pod, error) {
	uuid, err := pods.Resolve(g.dir, target)
	if err != nil {
		return nil, err
	}
	return pods.Read(g.dir, uuid)
}

// findRunning is findPod for a pod that must be running.
func findRunning(g *globalFlags, target string) (*pods.Pod, error) {
	p, err := findPod(g, target)
	if err != nil {
		return nil, err
	}
	if p.State != pods.Running {
		return nil, fmt.Errorf("pod %s is not running (%s)", p.UUID, p.State)
	}
	return p, nil
}

// openRunning resolves a UUID (or unique prefix) to a running pod and
// takes its pod.lck. An earlier operation it could not finish is named
// on stderr, a line per app; the command goes on unless it is on that app.
func openRunning(g *globalFlags, target, prefix string, stderr io.Writer) (*appops.Pod, error) {
	p, err := findRunning(g, target)
	if err != nil {
		return nil, err
	}
	op, err := appops.Open(p.Dir, p.UUID)
	if err != nil {
		return nil, err
	}
	if err := op.Unfinished(); err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			fail(stderr, prefix+": warning", errors.New(l))
		}
	}
	return op, nil
}

func appAdd(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	const prefix = "pod1 app add"
	// The UUID is the first word that is not a global flag (pod1 app
	// add --dir=X UUID IMAGE); parseApps takes those after it.
	uuid := ""
	for i := 0; i < len(args); {
		n, err := g.parseOne(args[i:])
		if err != nil {
			fail(stderr, prefix, err)
			return exitError
		}
		if n > 0 {
			i += n
			continue
		}
		if strings.HasPrefix(args[i], "-") {
			fail(stderr, prefix, fmt.Errorf("%s: app flags follow the image", args[i]))
			return exitError
		}
		uuid = args[i]
		args = args[i+1:]
		break
	}
	if uuid == "" || len(args) == 0 {
		fail(stderr, prefix, errors.New("usage: pod1 app add UUID IMAGE [app flags] [-- ARGS...]"))
		return exitError
	}
	apps, err := parseApps(g, args)
	if err == nil && len(apps) != 1 {
		err = errors.New("add takes one image")
	}
	if err != nil {
		fail(stderr, prefix, err)
		return exitError
	}
	p, err := openRunning(g, uuid, prefix, stderr)
	if err != nil {
		fail(stderr, prefix, err)
		return exitError
	}
	defer p.Close()
	name, err := p.Add(g.dir, apps[0])
	if err != nil {
		fail(stderr, prefix, err)
		return exitError
	}
	fmt.Fprintln(stdout, name)
	return 0
}

func appOp(g *globalFlags, op string, args []string, stdout, stderr io.Writer) int {
	prefix := "pod1 app " + op
	fs := newFlagSet(prefix)
	g.register(fs)
	name := fs.String("app", "", "app name")
	if code, done := parseCommand(fs, args, "usage: "+prefix+" UUID --app=NAME", stdout, stderr, prefix); done {
		return code
	}
	if fs.NArg() != 1 || *name == "" {
		fail(stderr, prefix, errors.New("want one UUID and --app=NAME"))
		return exitError
	}
	p, err := openRunning(g, fs.Arg(0), prefix, stderr)
	if err != nil {
		fail(stderr, prefix, err)
		return exitError
	}
	defer p.Close()
	switch op {
	case "start":
		err = p.Start(*name)
	case "stop":
		err = p.Stop(*name)
	case "rm":
		err = p.Rm(*name)
	}
	if err != nil {
		fail(stderr, prefix, err)
		return exitError
	}
	fmt.Fprintf(stdout, "%s %s\n", map[string]string{"start": "started", "stop": "stopped", "rm": "removed"}[op], *name)
	return 0
}

// appShow is `pod1 app list UUID` (a row per app) and `pod1 app status
// UUID --app=NAME` (key=value lines, as rkt app status prints them).
func appShow(g *globalFlags, op string, args []string, stdout, stderr io.Writer) int {
	prefix := "pod1 app " + op
	fs := newFlagSet(prefix)
	g.register(fs)
	name := fs.String("app", "", "app name (status)")
	if code, done := parseCommand(fs, args, "usage: "+prefix+" UUID [--app=NAME]", stdout, stderr, prefix); done {
		return code
	}
	if fs.NArg() != 1 || (op == "status") != (*name != "") {
		fail(stderr, prefix, errors.New("want one UUID, and --app=NAME for status"))
		return exitError
	}
	p, err := findPod(g, fs.Arg(0))
	if err != nil {
		fail(stderr, prefix, err)
		return exitError
	}
	if op == "list" {
		fmt.Fprintln(stdout, "NAME\tSTATE\tEXIT\tRESTARTS")
	}
	for _, a := range p.Apps {
		if op == "status" && a.Name != *name {
			continue
		}
		code, restarts := "-", 0
		if a.ExitCode != nil {
			code = fmt.Sprint(*a.ExitCode)
		}
		if a.Record != nil {
			restarts = a.Record.RestartCount
		}
		if op == "list" {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%d\n", a.Name, a.State, code, restarts)
			continue
		}
		fmt.Fprintf(stdout, "name=%s\nstate=%s\n", a.Name, a.State)
		for _, t := range []struct {
			k string
			v *time.Time
		}{{"created", a.CreatedAt}, {"started", a.StartedAt}, {"finished", a.FinishedAt}} {
			if t.v != nil && !t.v.IsZero() {
				fmt.Fprintf(stdout, "%s=%s\n", t.k, t.v.Format(time.RFC3339Nano))
			}
		}
		if a.ExitCode != nil {
			fmt.Fprintf(stdout, "exit_code=%d\n", *a.ExitCode)
		}
		fmt.Fprintf(stdout, "restart_count=%d\n", restarts)
		return 0
	}
	if op == "status" {
		fail(stderr, prefix, fmt.Errorf("pod %s has no app %q", p.UUID, *name))
		return exitError
	}
	return 0
}
