package gc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// sweepExitedGarbage collects the pods that ran, once their grace period
// is over.
func (c *collector) sweepExitedGarbage() error {
	uuids, err := pods.UUIDs(c.o.Dir, pods.IncludeExitedGarbage)
	if err != nil || len(uuids) == 0 {
		return err
	}
	// One mountinfo read for all pods; a pod nobody holds cannot gain
	// mounts, so it stays true for the pods we lock.
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	c.parallel(uuids, func(uuid string) {
		dir := filepath.Join(c.podsDir(layout.PodsExitedGarbage), uuid)
		ctime, err := changeTime(dir)
		if err != nil {
			return // moved on or collected meanwhile
		}
		if time.Since(ctime) < c.o.GracePeriod {
			c.logf("pod %q not removed: still within grace period (%s)", uuid, c.o.GracePeriod)
			c.record(&c.res.Waiting, uuid)
			return
		}
		c.collect(uuid, dir, true, mounts)
	})
	return nil
}

// sweepWorkers is how many pods are collected at once: each is mostly
// waiting on its stage1's gc entrypoint and on the disk. On a file system
// mounted with online discard (and no journal to defer it), every block a
// removal frees is discarded before the unlink returns, one wait per
// directory; eight removals at once keep that many discards in flight,
// which a virtual disk serves side by side, where four left it idle half
// the time (docs/hostside.md).
const sweepWorkers = 8

// parallel calls f for each pod, a few at a time. Pods are independent:
// each is collected under its own lock.
func (c *collector) parallel(uuids []string, f func(uuid string)) {
	var wg sync.WaitGroup
	next := make(chan string)
	for w := 0; w < min(sweepWorkers, len(uuids)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range next {
				f(u)
			}
		}()
	}
	for _, u := range uuids {
		next <- u
	}
	close(next)
	wg.Wait()
}

// sweepGarbage removes the pods that never ran, and those whose stage1 was
// already cleaned up by an earlier (interrupted) run.
func (c *collector) sweepGarbage() error {
	uuids, err := pods.UUIDs(c.o.Dir, pods.IncludeGarbage)
	if err != nil || len(uuids) == 0 {
		return err
	}
	// Every pod listed was renamed into garbage/ before the listing (by
	// this run's sweepExitedGarbage or by another collector): make those
	// renames durable before removing anything, so that a crash never
	// leaves a half-removed pod outside garbage/.
	if err := safefile.SyncDirs(c.podsDir(layout.PodsExitedGarbage), c.podsDir(layout.PodsGarbage)); err != nil {
		return err
	}
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	c.parallel(uuids, func(uuid string) {
		c.collect(uuid, filepath.Join(c.podsDir(layout.PodsGarbage), uuid), false, mounts)
	})
	return nil
}

// collect removes one pod under its exclusive lock; ran is set for pods in
// exited-garbage/, whose stage1 gets to clean up first and which then only
// move to garbage/ (sweepGarbage removes them after one fsync for all).
func (c *collector) collect(uuid, dir string, ran bool, mounts []mount) {
	l, err := lockPod(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return
	case errors.Is(err, errBusy):
		c.record(&c.res.Busy, uuid)
		return
	case err != nil:
		c.fail(uuid, err)
		return
	}
	defer l.Close()
	if !l.stillAt(dir) {
		return // another collector moved it on before we locked it
	}
	c.mu.Lock()
	announced := c.moved[uuid]
	c.mu.Unlock()
	if !announced {
		fmt.Fprintf(c.o.Out, "Garbage collecting pod %q\n", uuid)
	}
	if ran {
		err = c.cleanUp(uuid, dir, mounts)
	} else {
		err = c.remove(uuid, dir, mounts)
	}
	if err != nil {
		c.logf("pod %s: not removed, left for the next gc: %v", uuid, err)
		c.fail(uuid, err)
		return
	}
	if ran {
		c.mu.Lock()
		if c.moved == nil {
			c.moved = map[string]bool{}
		}
		c.moved[uuid] = true
		c.mu.Unlock()
		return
	}
	c.record(&c.res.Collected, uuid)
}

// cleanUp runs a pod's stage1 gc, unmounts what is left under it, and moves
// it to garbage/: from there on only files are left, and an interrupted
// removal resumes there without running the stage1 again or waiting out a
// grace period. The move is made durable by sweepGarbage, once for all
// pods, before it removes any of them: a crash before that can only bring
// pods back to exited-garbage/, whose stage1 gc is run again (it is
// idempotent, as rkt's contract asks).
func (c *collector) cleanUp(uuid, dir string, mounts []mount) error {
	c.step(StepStage1GC, uuid)
	if err := c.stage1GC(uuid, dir); err != nil {
		return err
	}
	c.step(StepUnmount, uuid)
	if err := unmountUnder(dir, mounts); err != nil {
		return fmt.Errorf("pod %s: %w", uuid, err)
	}
	c.step(StepToGarbage, uuid)
	if err := renameNoReplace(dir, filepath.Join(c.podsDir(layout.PodsGarbage), uuid)); err != nil {
		return fmt.Errorf("pod %s: move to garbage: %w", uuid, err)
	}
	return nil
}

// remove removes a pod of garbage/.
func (c *collector) remove(uuid, dir string, mounts []mount) error {
	// Never remove through a mount: whatever is still mounted goes
	// first, and a failure keeps the pod.
	if err := unmountUnder(dir, mounts); err != nil {
		return fmt.Errorf("pod %s: %w", uuid, err)
	}
	c.step(StepRemove, uuid)
	// No fsync after: a removal lost in a crash leaves the pod in
	// garbage/, where the next run removes it again.
	if err := removeTree(dir, func() { c.step(StepRemoving, uuid) }); err != nil {
		return fmt.Errorf("pod %s: %w", uuid, err)
	}
	return nil
}
