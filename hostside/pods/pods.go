// Package pods reads pod directories from the host the way rkt does
// (contract §4, §6): a pod's state is the directory it is in plus a
// non-blocking shared-lock test, its apps' exit codes are the status files
// its stage1 wrote. Reading never takes the exclusive lock and never blocks
// on a running pod.
package pods

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/status"
)

// State is a pod's lifecycle state (rkt's pkg/pod names).
type State string

// The states, as rkt names them.
const (
	Embryo         State = "embryo"
	Preparing      State = "preparing"
	AbortedPrepare State = "aborted prepare"
	Prepared       State = "prepared"
	Running        State = "running"
	Exited         State = "exited"
	ExitedDeleting State = "exited deleting"
	ExitedGarbage  State = "exited garbage"
	Deleting       State = "deleting"
	Garbage        State = "garbage"
)

// dirs maps each pods/ subdirectory to its state when locked and unlocked.
var dirs = []struct {
	name             string
	locked, unlocked State
}{
	{"embryo", Embryo, Embryo},
	{"prepare", Preparing, AbortedPrepare},
	{"prepared", Prepared, Prepared},
	{"run", Running, Exited},
	{"exited-garbage", ExitedDeleting, ExitedGarbage},
	{"garbage", Deleting, Garbage},
}

// App is one app of a pod.
type App struct {
	Name string
	// ExitCode is nil while the app has no (valid) status file.
	ExitCode *int
}

// Pod is what the host can tell about a pod.
type Pod struct {
	UUID  string
	Dir   string
	State State
	Apps  []App
}

// ErrNotFound is returned when no pod has the UUID.
var ErrNotFound = errors.New("pod not found")

// Read returns the pod uuid under dataDir (rkt's --dir).
func Read(dataDir, uuid string) (*Pod, error) {
	// A pod moves between directories (run -> exited-garbage) while we
	// look; a second pass finds it where it went.
	for pass := 0; pass < 2; pass++ {
		for _, d := range dirs {
			dir := filepath.Join(dataDir, "pods", d.name, uuid)
			held, err := lockHeld(dir)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("pod %s: %w", uuid, err)
			}
			p := &Pod{UUID: uuid, Dir: dir, State: d.unlocked}
			if held {
				p.State = d.locked
			}
			if err := p.readApps(); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("pod %s: %w", uuid, err)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, uuid)
}

// lockHeld tests the pod directory's lock the way rkt does: a shared,
// non-blocking flock on a new open file description.
func lockHeld(dir string) (bool, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	switch err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil:
		return false, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	default:
		return false, fmt.Errorf("flock %s: %w", dir, err)
	}
}

// StatusDir is where the pod's status files are on the host: with an
// overlay stage1 rootfs, in the overlay's upper directory, which is there
// even after the overlay was unmounted (contract §4).
func (p *Pod) StatusDir() string {
	if id, err := os.ReadFile(filepath.Join(p.Dir, "stage1TreeStoreID")); err == nil {
		if _, err := os.Stat(filepath.Join(p.Dir, "overlay-prepared")); err == nil {
			return filepath.Join(p.Dir, "overlay", strings.TrimSpace(string(id)), "upper/rkt/status")
		}
	}
	return filepath.Join(p.Dir, "stage1/rootfs/rkt/status")
}

func (p *Pod) readApps() error {
	b, err := os.ReadFile(filepath.Join(p.Dir, "pod"))
	if err != nil {
		return err
	}
	var m struct {
		Apps []struct {
			Name string `json:"name"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("pod manifest: %w", err)
	}
	sd := p.StatusDir()
	for _, a := range m.Apps {
		app := App{Name: a.Name}
		if code, err := status.Read(sd, a.Name); err == nil {
			app.ExitCode = &code
		}
		p.Apps = append(p.Apps, app)
	}
	return nil
}
