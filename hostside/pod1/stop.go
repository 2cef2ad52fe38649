package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

const stopUsage = `usage: pod1 stop [--force] [--uuid-file=FILE] UUID...

Stops running pods through their stage1's stop entrypoint, as rkt stop
does: gracefully, or at once with --force. A pod that already ran is
reported as stopped.

flags:`

const annStop = layout.AnnStop

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
	ep, err := stage1Entrypoint(p.Dir, annStop)
	if err != nil {
		return "", fmt.Errorf("pod %s: %w", uuid, err)
	}
	path, argv0, err := resolveEntrypoint(p.Dir, ep)
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

// stage1Entrypoint reads an entrypoint annotation from the pod's copy of
// the stage1 manifest.
func stage1Entrypoint(podDir, annotation string) (string, error) {
	b, err := safefile.ReadRegularIn(podDir, layout.Stage1Manifest, 16<<20)
	if err != nil {
		return "", fmt.Errorf("stage1 manifest: %w", err)
	}
	var m struct {
		Annotations []struct{ Name, Value string } `json:"annotations"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("stage1 manifest: %w", err)
	}
	for _, a := range m.Annotations {
		if a.Name == annotation && a.Value != "" {
			return a.Value, nil
		}
	}
	return "", fmt.Errorf("the stage1 has no %s entrypoint", filepath.Base(annotation))
}

// resolveEntrypoint finds an entrypoint in the pod's (mounted) stage1
// rootfs, symlinks resolved inside it: the stage1 must not be able to
// point a command we run as root at a host binary. argv0 is the path
// rkt's stage0 would pass, whose base name picks our stage1's role.
func resolveEntrypoint(podDir, ep string) (path, argv0 string, err error) {
	root := filepath.Join(podDir, layout.Stage1RootFS)
	path, err = securejoin.SecureJoin(root, ep)
	if err != nil {
		return "", "", err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", "", fmt.Errorf("entrypoint %s: %w", ep, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", "", fmt.Errorf("entrypoint %s is not an executable file", ep)
	}
	return path, filepath.Join(root, filepath.Clean("/"+ep)), nil
}

// lastLine is the last line of s that is not blank, trimmed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
