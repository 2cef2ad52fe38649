package pods

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// ErrNotRunning means the pod is not (or no longer) running.
var ErrNotRunning = errors.New("pod is not running")

// ContainerPid1 returns the host pid of the pod's PID 1, the process enter
// joins (rkt Pod.ContainerPid1): the pid file's content or, for stage1s
// that write ppid instead, that process's only child. Between the pod
// entering run/ and its stage1 writing the file there is a short window:
// it waits through it for as long as the pod runs and ctx allows.
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
		if pid, err := readPid(p.Dir); err == nil {
			return pid, nil
		} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errNoChild) {
			return 0, fmt.Errorf("pod %s: %w", uuid, err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("pod %s: wait for its pid: %w", uuid, ctx.Err())
		case <-t.C:
		}
	}
}

var errNoChild = errors.New("no child yet")

func readPid(dir string) (int, error) {
	if b, err := safefile.ReadRegularIn(dir, layout.Pid, 64); err == nil {
		return parsePid(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	b, err := safefile.ReadRegularIn(dir, layout.Ppid, 64)
	if err != nil {
		return 0, err
	}
	ppid, err := parsePid(b)
	if err != nil {
		return 0, err
	}
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ppid, ppid))
	if err != nil {
		return 0, errNoChild
	}
	f := strings.Fields(string(kids))
	switch len(f) {
	case 0:
		return 0, errNoChild
	case 1:
		return parsePid([]byte(f[0]))
	}
	return 0, fmt.Errorf("ppid %d has %d children, want one", ppid, len(f))
}

func parsePid(b []byte) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad pid %q", b)
	}
	return n, nil
}
