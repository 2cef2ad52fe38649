package pods

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pod1/pod1/podpid"
)

// ErrNotRunning means the pod is not (or no longer) running.
var ErrNotRunning = errors.New("pod is not running")

// ContainerPid1 returns the host pid of the pod's PID 1, the process enter
// joins (rkt Pod.ContainerPid1): the pid file's content or, for stage1s
// that write ppid instead, that process's only child, once podpid has
// checked that it is this pod's PID 1 (the pod could have rewritten the
// file). Between the pod entering run/ and its stage1 writing the file
// there is a short window: it waits through it for as long as the pod runs
// and ctx allows.
func ContainerPid1(ctx context.Context, dataDir, uuid string) (int, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		p, err := Read(dataDir, uuid)
		if err != nil {
			return 0, err
		}
		if p.State != Running {
			return 0, fmt.Errorf("pod %s: %w (%s)", uuid, ErrNotRunning, p.State)
		}
		pid1, err := podpid.Open(p.Dir)
		if err == nil {
			pid1.Close()
			return pid1.Pid, nil
		}
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, podpid.ErrNoChild) && !errors.Is(err, podpid.ErrGone) {
			return 0, fmt.Errorf("pod %s: pid file: %w", uuid, err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("pod %s: wait for its pid: %w", uuid, ctx.Err())
		case <-t.C:
		}
	}
}
