// Package gc collects pods the way rkt v1.30.0's `rkt gc` does, in two
// phases, and safely beside it, beside itself and beside `pod1 run`.
//
// Mark: exited pods in run/ are renamed to exited-garbage/ (the rename's
// ctime starts their grace period); aborted prepares, expired prepared pods
// and long-abandoned embryos go to garbage/. Sweep: an exited-garbage pod
// past its grace period gets its stage1's gc entrypoint run, every mount
// still under it unmounted (deepest first, from mountinfo), then it moves
// to garbage/; garbage pods are removed.
//
// Every step holds the pod directory's exclusive lock, taken without
// waiting: a pod whose lock is held (running, being prepared, or being
// collected by another gc or by rkt) is never touched. Every state change
// is a rename, so a gc killed at any point leaves each pod whole in a state
// directory, and the next run carries on from there; removal only starts
// once nothing is mounted under the pod, and never crosses into a mount.
package gc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/safefile"
)

// Defaults are rkt's.
const (
	DefaultGracePeriod    = 30 * time.Minute
	DefaultExpirePrepared = 24 * time.Hour
	// DefaultStage1Timeout bounds a stage1 gc entrypoint: one that hangs
	// must not stop the collection of every other pod.
	DefaultStage1Timeout = time.Minute
)

// Options configure one collection.
type Options struct {
	// Dir is the data directory (rkt's --dir).
	Dir string
	// GracePeriod is how long an exited pod stays in exited-garbage/
	// before it is removed.
	GracePeriod time.Duration
	// ExpirePrepared is how long a prepared pod (or an abandoned embryo)
	// may wait before it is garbage.
	ExpirePrepared time.Duration
	// MarkOnly stops after moving exited and aborted pods.
	MarkOnly bool
	// LocalConfig is passed to stage1 gc entrypoints of interface
	// version 5 and later (--local-config DIR).
	LocalConfig string
	// Debug passes --debug to the stage1 gc entrypoints.
	Debug bool
	// Stage1Timeout bounds each stage1 gc entrypoint (0: default).
	Stage1Timeout time.Duration
	// Out gets one line per collected pod (nil discards); progress and
	// problems go to logx.
	Out io.Writer
	// Step, if set, is called before each step on each pod; tests use it
	// to kill the collector at every step.
	Step func(step Step, uuid string)
}

// Step names a point in the collection of one pod.
type Step string

// The steps, in order.
const (
	StepMark      Step = "mark"       // locked, before the rename out of run/ (or prepare/...)
	StepStage1GC  Step = "stage1-gc"  // locked, before the stage1's gc entrypoint
	StepUnmount   Step = "unmount"    // after it, before unmounting
	StepToGarbage Step = "to-garbage" // unmounted, before the move to garbage/
	StepRemove    Step = "remove"     // in garbage/, before the removal
	StepRemoving  Step = "removing"   // part of the pod removed
)

// Result says what happened to each pod.
type Result struct {
	Marked    []string         // moved to exited-garbage/ or garbage/
	Collected []string         // removed
	Waiting   []string         // in exited-garbage/ within the grace period
	Busy      []string         // lock held by someone else: not touched
	Failed    map[string]error // could not be cleaned: left for the next run
}

// fail records a pod left for the next run.
func (c *collector) fail(uuid string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.res.Failed == nil {
		c.res.Failed = map[string]error{}
	}
	c.res.Failed[uuid] = err
}

// record appends a pod to one of the result's lists.
func (c *collector) record(list *[]string, uuid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*list = append(*list, uuid)
}

// Run collects garbage under o.Dir. An error means a whole phase could not
// run; per-pod failures are in Result.Failed.
func Run(o Options) (*Result, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Stage1Timeout == 0 {
		o.Stage1Timeout = DefaultStage1Timeout
	}
	o.Out = &lockedWriter{w: o.Out}
	c := &collector{o: o, res: &Result{}}
	phases := []func() error{c.recoverApps, c.markExited, c.markAborted}
	if !o.MarkOnly {
		phases = append(phases, c.markExpired, c.sweepExitedGarbage, c.sweepGarbage)
	}
	for _, ph := range phases {
		if err := ph(); err != nil {
			return c.res, err
		}
	}
	return c.res, nil
}

type collector struct {
	o   Options
	mu  sync.Mutex // guards res and moved, written by the sweep workers
	res *Result
	// moved are the pods this run moved from exited-garbage/ to
	// garbage/; their removal is not announced twice.
	moved map[string]bool
	own   ownCache
}

func (c *collector) podsDir(state string) string {
	return filepath.Join(c.o.Dir, layout.StateDir(state))
}

func (c *collector) step(s Step, uuid string) {
	if c.o.Step != nil {
		c.o.Step(s, uuid)
	}
}

func (c *collector) logf(format string, a ...any) { logx.Infof(format, a...) }

// lockedWriter serialises the writes of the sweep workers (and of the
// stage1 gc entrypoints' stderr copiers) to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// markExited moves every exited pod of run/ to exited-garbage/.
func (c *collector) markExited() error {
	return c.mark(layout.PodsRun, pods.IncludeRun, layout.PodsExitedGarbage, 0, "moving pod %q to garbage")
}

// markAborted moves every aborted prepare to garbage/.
func (c *collector) markAborted() error {
	return c.mark(layout.PodsPrepare, pods.IncludePrepare, layout.PodsGarbage, 0, "moving failed prepare %q to garbage")
}

// markExpired moves prepared pods older than ExpirePrepared to garbage/,
// and embryos abandoned as long: their creator died between mkdir and
// lock (rkt leaves those forever).
func (c *collector) markExpired() error {
	if err := c.mark(layout.PodsPrepared, pods.IncludePrepared, layout.PodsGarbage, c.o.ExpirePrepared, "moving expired prepared pod %q to garbage"); err != nil {
		return err
	}
	return c.mark(layout.PodsEmbryo, pods.IncludeEmbryo, layout.PodsGarbage, c.o.ExpirePrepared, "moving abandoned embryo %q to garbage")
}

// mark renames every pod of from/ whose lock is free (and, when minAge is
// set, whose directory is older than that) to to/. The lock is held across
// the rename, so the pod cannot be taken by anyone meanwhile.
func (c *collector) mark(from string, kind pods.Include, to string, minAge time.Duration, msg string) error {
	uuids, err := pods.UUIDs(c.o.Dir, kind)
	if err != nil {
		return err
	}
	// The renames are made durable once for all, before the sweep acts
	// on any of them: a crash before that only leaves pods to be marked
	// again.
	defer func() {
		if err := safefile.SyncDirs(c.podsDir(from), c.podsDir(to)); err != nil {
			c.logf("sync pod directories: %v", err)
		}
	}()
	for _, uuid := range uuids {
		dir := filepath.Join(c.podsDir(from), uuid)
		if minAge > 0 {
			ctime, err := changeTime(dir)
			if err != nil || time.Since(ctime) < minAge {
				continue
			}
		}
		l, err := lockPod(dir)
		if errors.Is(err, errBusy) {
			c.record(&c.res.Busy, uuid)
			continue
		}
		if errors.Is(err, os.ErrNotExist) {
			continue // moved on or collected by someone else
		}
		if err != nil {
			c.fail(uuid, err)
			continue
		}
		c.step(StepMark, uuid)
		err = renameNoReplace(dir, filepath.Join(c.podsDir(to), uuid))
		l.Close()
		switch {
		case err == nil:
			c.logf(msg, uuid)
			c.record(&c.res.Marked, uuid)
		case !errors.Is(err, os.ErrNotExist):
			c.fail(uuid, fmt.Errorf("pod %s: move to %s: %w", uuid, to, err))
		}
	}
	return nil
}

// changeTime is a path's ctime: for a pod directory, when it was last
// renamed (rkt's grace period and expiry clock).
func changeTime(path string) (time.Time, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return time.Time{}, err
	}
	return time.Unix(st.Ctim.Unix()), nil
}

// renameNoReplace renames a pod directory, never over an existing one: two
// collectors racing on one pod must not let one pod replace another. The
// caller makes it durable (syncDirs).
func renameNoReplace(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		return err
	}
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.ENOENT) {
		return os.ErrNotExist
	}
	return err
}
