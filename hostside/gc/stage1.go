package gc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/pod1/pod1/hostside/entrypoint"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/safefile"
)

// Stage1 interface versions (rkt stage0/manifest.go).
const (
	// localConfigMinVersion is the first interface version whose gc
	// entrypoint takes --local-config.
	localConfigMinVersion = 5
)

// stage1GC runs the pod's stage1 gc entrypoint the way rkt's stage0.GC
// does: argv [--debug] [--local-config DIR] UUID (the flag's value as a
// separate word, as rkt passes it), cwd the pod directory, the
// environment inherited, stdout discarded, no lock fd. A stage1 without
// the annotation, or whose tree is gone (its overlay unmounted and its
// image removed), has nothing we can run: that is logged and the pod is
// collected, as rkt does. A gc entrypoint that fails keeps the pod, so
// that what it could not clean is not forgotten.
func (c *collector) stage1GC(uuid, dir string) error {
	ep, version, err := gcEntrypoint(dir)
	if err != nil {
		logx.Warnf("pod %s: skipping stage1 gc: %v", uuid, err)
		return nil
	}
	path, argv0, err := c.findEntrypoint(dir, ep)
	if err != nil {
		logx.Warnf("pod %s: skipping stage1 gc: %v", uuid, err)
		return nil
	}
	if done, err := c.ownStage1GC(uuid, dir, path); done {
		if err != nil {
			return fmt.Errorf("pod %s: stage1 gc %s: %w", uuid, ep, err)
		}
		return nil
	}
	args := []string{}
	if c.o.Debug {
		args = append(args, "--debug")
	}
	if version >= localConfigMinVersion && c.o.LocalConfig != "" {
		args = append(args, "--local-config", c.o.LocalConfig)
	}
	args = append(args, uuid)
	ctx, cancel := context.WithTimeout(context.Background(), c.o.Stage1Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Args[0] = argv0 // the stage1 may pick its role from argv[0]
	cmd.Dir = dir
	cmd.Stderr = logx.Writer()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %v", ctx.Err(), c.o.Stage1Timeout)
		}
		return fmt.Errorf("pod %s: stage1 gc %s: %w", uuid, ep, err)
	}
	return nil
}

// errNoGC means the stage1 declares no gc entrypoint.
var errNoGC = errors.New("the stage1 has no gc entrypoint")

// gcEntrypoint reads the gc annotation and the interface version from the
// pod's copy of the stage1 manifest.
func gcEntrypoint(dir string) (string, int, error) {
	s1, err := entrypoint.ReadPod(dir)
	if err != nil {
		return "", 0, err
	}
	ep, err := s1.Path(layout.AnnGC)
	if errors.Is(err, entrypoint.ErrNotDeclared) {
		return "", 0, errNoGC
	}
	if err != nil {
		return "", 0, err
	}
	// A version that is no number is taken as the first, as ever: gc
	// then passes no flag the stage1 might not know.
	version, err := s1.Version()
	if err != nil {
		version = 1
	}
	return ep, version, nil
}

// findEntrypoint locates the entrypoint in the pod's stage1 rootfs or,
// when that overlay is no longer mounted (after a reboot), in the image
// tree it was the upper layer of: rkt's tree store or pod1's image store.
// The entrypoint resolver finds it inside each tree, so a stage1 cannot
// point gc, which runs as root, at a host binary. It returns the file to
// execute and the argv[0] rkt would give it.
func (c *collector) findEntrypoint(dir, ep string) (path, argv0 string, err error) {
	roots := []string{filepath.Join(dir, layout.Stage1RootFS)}
	if b, err := safefile.ReadRegularIn(dir, layout.Stage1TreeStoreID, 4096); err == nil {
		id := strings.TrimSpace(string(b))
		if id != "" && !strings.ContainsAny(id, "/\x00") && id != "." && id != ".." {
			roots = append(roots,
				filepath.Join(c.o.Dir, layout.TreeStoreDir, id, layout.RootfsName),
				filepath.Join(c.o.Dir, layout.ImageStoreDir, id, layout.RootfsName))
		}
	}
	for _, root := range roots {
		if p, err := entrypoint.In(root, ep); err == nil {
			return p, filepath.Join(root, ep), nil
		}
	}
	return "", "", fmt.Errorf("gc entrypoint %s not found in the stage1 tree", ep)
}
