package pods

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// pollInterval is how often the wait helpers look again. rkt polls every
// 100 ms; a lock test costs three system calls, so we look more often and
// report an exit sooner.
const pollInterval = 10 * time.Millisecond

// WaitFinished waits until the pod uuid is finished (exited, aborted,
// garbage or gone; rkt WaitFinished) or ctx ends, and returns it as read
// last. A pod that disappears (collected meanwhile) is ErrNotFound.
func WaitFinished(ctx context.Context, dataDir, uuid string) (*Pod, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		p, err := Read(dataDir, uuid)
		if err != nil || p.IsFinished() {
			return p, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s: wait for the pod to finish: %w", uuid, ctx.Err())
		case <-t.C:
		}
	}
}

// WaitReady waits until the pod's supervisor is ready (its stage1 made
// rkt/supervisor-status a symlink to "ready"; rkt WaitReady) or ctx ends.
// Unlike rkt, which waits forever, a pod that finishes without becoming
// ready is ErrNotReady.
func WaitReady(ctx context.Context, dataDir, uuid string) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		p, err := Read(dataDir, uuid)
		if err != nil {
			return err
		}
		ready, err := p.SupervisorReady()
		if err != nil {
			return err
		}
		if ready {
			return nil
		}
		if p.IsFinished() {
			return fmt.Errorf("pod %s: %w", uuid, ErrNotReady)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s: wait for the pod to be ready: %w", uuid, ctx.Err())
		case <-t.C:
		}
	}
}

// SupervisorReady reports whether the pod's stage1 says its supervisor is
// ready (rkt IsSupervisorReady: rkt/supervisor-status -> "ready" in the
// stage1 rootfs, the overlay's upper directory for an overlay pod).
func (p *Pod) SupervisorReady() (bool, error) {
	link := filepath.Join(p.Stage1RootfsPath(), layout.SupervisorStatusIn)
	buf := make([]byte, 16)
	n, err := unix.Readlink(link, buf)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pod %s: read supervisor-status: %w", p.UUID, err)
	}
	return string(buf[:n]) == "ready", nil
}
