package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/pod1/pod1/hostside/entrypoint"
	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/layout"
)

const stopUsage = `usage: pod1 stop [--force] [--uuid-file=FILE] UUID...

Stops running pods through their stage1's stop entrypoint, as rkt stop
does: gracefully, or at once with --force. A pod that already ran is
reported as stopped.

flags:`

// cmdStop implements `pod1 stop` (rkt/stop.go).
func cmdStop(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("stop")
	g.register(fs)
	force := fs.Bool("force", false, "stop at once (the stage1 kills the apps)")
	uuidFile := fs.String("uuid-file", "", "read the pod UUID from this file")
	if code, done := parseCommand(fs, args, stopUsage, stdout, stderr, "pod1 stop"); done {
		return code
	}
	targets := fs.Args()
	switch {
	case *uuidFile != "" && len(targets) == 0:
		b, err := os.ReadFile(*uuidFile)
		if err != nil {
			fail(stderr, "pod1 stop", err)
			return exitError
		}
		targets = []string{strings.TrimSpace(string(b))}
	case *uuidFile == "" && len(targets) > 0:
	default:
		fail(stderr, "pod1 stop", errors.New("want UUIDs or --uuid-file (not both)"))
		return exitError
	}
	failed := 0
	for _, t := range targets {
		msg, err := stopOne(g, t, *force, stdout, stderr)
		if err != nil {
			fail(stderr, "pod1 stop", err)
			failed++
			continue
		}
		fmt.Fprintln(stdout, msg)
	}
	// Each failure had its line: no summary after them.
	if failed > 0 {
		return exitError
	}
	return 0
}

// stopOne runs the stop entrypoint of one pod as rkt's stage0.StopPod
// does: argv [--force] UUID, cwd the pod directory, our stdio and
// environment. It returns the line to print on success.
func stopOne(g *globalFlags, target string, force bool, stdout, stderr io.Writer) (string, error) {
	p, err := findPod(g, target)
	if err != nil {
		return "", err
	}
	uuid := p.UUID
	if p.IsAfterRun() {
		return fmt.Sprintf("pod %q is already stopped", uuid), nil
	}
	if p.State != pods.Running {
		return "", fmt.Errorf("pod %s is not running (%s)", uuid, p.State)
	}
	path, argv0, err := podEntrypoint(p.Dir, layout.AnnStop)
	if err != nil {
		return "", fmt.Errorf("pod %s: %w", uuid, err)
	}
	cmd := exec.Command(path)
	cmd.Args = []string{argv0}
	if force {
		cmd.Args = append(cmd.Args, "--force")
	}
	cmd.Args = append(cmd.Args, uuid)
	// The entrypoint's stderr is kept: when it fails, its reason goes
	// into the pod's one line rather than on a line of its own.
	var errBuf limitedBuffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = p.Dir, stdout, &errBuf
	if err := cmd.Run(); err != nil {
		if why := lastLine(errBuf.String()); why != "" {
			return "", fmt.Errorf("pod %s: error stopping: %s (%w)", uuid, why, err)
		}
		return "", fmt.Errorf("pod %s: error stopping: %w", uuid, err)
	}
	_, _ = io.WriteString(stderr, errBuf.String())
	return fmt.Sprintf("%q", uuid), nil
}

// podEntrypoint resolves one of the stage1's entry points in the pod's
// stage1 rootfs, as the pod's copy of the stage1 manifest declares it.
func podEntrypoint(podDir, annotation string) (file, argv0 string, err error) {
	s1, err := entrypoint.ReadPod(podDir)
	if err != nil {
		return "", "", err
	}
	return s1.ResolvePod(annotation, podDir)
}

// lastLine is the last line of s that is not blank, trimmed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
