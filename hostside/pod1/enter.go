package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
)

const enterUsage = `usage: pod1 enter [--app=NAME] [--user] UUID [CMD [ARGS...]]

Runs CMD (default /bin/bash, or /bin/sh in an image without bash) inside a
running pod, in the app's root and namespaces, with the app's environment,
as rkt enter does. It runs as root, as rkt's did, holding no more than a
root process of the app could (the app's capabilities, system call filter,
no_new_privs, cgroups and user namespace); --user runs it as the app's user
and groups instead. The exit code is the command's.

flags:`

const (
	defaultCmd = "/bin/bash" // rkt's; our stage1 falls back to /bin/sh
	// pidWait bounds the wait for a just-started pod's pid file.
	pidWait = 10 * time.Second
)

// cmdEnter implements `pod1 enter` (rkt/enter.go): it execs the pod's
// stage1 enter entrypoint, which joins the pod and runs the command, so
// the exit code is the command's.
func cmdEnter(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("enter")
	g.register(fs)
	app := fs.String("app", "", "the app to enter (required when the pod has several)")
	appUser := fs.Bool("user", false, "run as the app's user and groups, not root")
	// Flags stop at the UUID: what follows is the command and its own
	// flags (rkt disables interspersed flags here).
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, enterUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fail(stderr, "pod1 enter", err)
		return exitError
	}
	if fs.NArg() < 1 {
		fail(stderr, "pod1 enter", errors.New("want a UUID"))
		return exitError
	}
	argv, err := enterArgv(g, *app, *appUser, fs.Arg(0), fs.Args()[1:])
	if err != nil {
		fail(stderr, "pod1 enter", err)
		return exitError
	}
	err = unix.Exec(argv[1], append([]string{argv[0]}, argv[2:]...), os.Environ())
	fail(stderr, "pod1 enter", fmt.Errorf("exec %s: %w", argv[1], err))
	return exitError
}

// enterArgv resolves the pod and returns, in order, the argv[0] to give
// the enter entrypoint, the file to execute, and its arguments. It also
// chdirs to the pod directory, the entrypoint's cwd.
func enterArgv(g *globalFlags, app string, appUser bool, target string, cmd []string) ([]string, error) {
	p, err := findRunning(g, target)
	if err != nil {
		return nil, err
	}
	uuid := p.UUID
	if app == "" {
		if app, err = onlyApp(p); err != nil {
			return nil, err
		}
	} else if err := checkApp(p, app); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), pidWait)
	defer cancel()
	pid, err := pods.ContainerPid1(ctx, g.dir, uuid)
	if err != nil {
		return nil, err
	}
	path, argv0, err := podEntrypoint(p.Dir, layout.AnnEnter)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", uuid, err)
	}
	if len(cmd) == 0 {
		logx.Infof("no command given, running %s", defaultCmd)
		cmd = []string{defaultCmd}
	}
	if err := os.Chdir(p.Dir); err != nil {
		return nil, fmt.Errorf("pod %s: %w", uuid, err)
	}
	argv := []string{argv0, path, "--pid=" + strconv.Itoa(pid), "--appname=" + app}
	if appUser {
		// The stage1's own flag: a stage1 older than it refuses it.
		argv = append(argv, "--app-user")
	}
	return append(append(argv, "--"), cmd...), nil
}

func onlyApp(p *pods.Pod) (string, error) {
	switch len(p.Apps) {
	case 0:
		return "", fmt.Errorf("pod %s has no apps", p.UUID)
	case 1:
		return p.Apps[0].Name, nil
	}
	names := make([]string, len(p.Apps))
	for i, a := range p.Apps {
		names[i] = a.Name
	}
	return "", fmt.Errorf("pod %s has several apps (%s): choose one with --app", p.UUID, strings.Join(names, ", "))
}

func checkApp(p *pods.Pod, app string) error {
	for _, a := range p.Apps {
		if a.Name == app {
			return nil
		}
	}
	return fmt.Errorf("pod %s has no app %q", p.UUID, app)
}
