// Package appops does the host's half of rkt's app operations on a running
// mutable pod (contract §7): what rkt's stage0 does for `rkt app add`,
// `start`, `stop` and `rm` (render the app, rewrite the pod manifest, the
// -created and -started markers), then the stage1's app entry point, which
// asks the pod's PID 1 to act. Operations on one pod are serialised with
// the pod's pod.lck, as rkt does.
//
// Every operation that changes the pod's files is journalled first (an
// intent file in the pod directory), so that one interrupted at any point
// (its caller killed, an error half-way) is finished or undone by the next
// operation on the pod or by pod1 gc: Recover.
package appops

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/entrypoint"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podpid"
	"github.com/pod1/pod1/safefile"
)

// ErrBusy is returned by TryOpen when another app operation holds the pod.
var ErrBusy = errors.New("an app operation is under way")

// Step, if set, is called at each step of Add and Rm: the tests that prove
// an operation killed anywhere is recovered kill the process there.
var Step func(step string)

func step(s string) {
	if Step != nil {
		Step(s)
	}
}

// Pod is a running mutable pod, locked for one app operation.
type Pod struct {
	Dir  string
	UUID string
	lock *os.File
	// unfinished are the apps whose journalled operation Recover could
	// not finish this time, with why. Their entries stay for the next
	// try; operations on other apps go on.
	unfinished map[string]error
}

// Unfinished reports the journalled operations Recover could not finish,
// nil if none: one error per app, each naming it.
func (p *Pod) Unfinished() error {
	var errs []error
	for _, err := range p.unfinished {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// usable refuses an operation on an app whose earlier operation is still
// unfinished, other than the rm that retries it.
func (p *Pod) usable(name string) error {
	if err := p.unfinished[name]; err != nil {
		return fmt.Errorf("%w (pod1 app rm %s --app=%s retries it)", err, p.UUID, name)
	}
	return nil
}

// Open takes the pod's pod.lck (blocking: operations on one pod queue up,
// as rkt's do) and finishes any operation an earlier caller left half
// done. An operation it cannot finish does not make the pod unusable:
// Unfinished says which, and only that app's operations but rm are
// refused, so one stuck entry never wedges every later operation.
func Open(podDir, uuid string) (*Pod, error) {
	return open(podDir, uuid, 0)
}

// TryOpen is Open without waiting: ErrBusy if pod.lck is held (pod1 gc
// uses it, and leaves a busy pod for its next run).
func TryOpen(podDir, uuid string) (*Pod, error) {
	return open(podDir, uuid, unix.LOCK_NB)
}

func open(podDir, uuid string, how int) (*Pod, error) {
	f, err := os.OpenFile(filepath.Join(podDir, layout.PodLock), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pod %s: open %s: %w", uuid, layout.PodLock, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("pod %s: lock %s: %w", uuid, layout.PodLock, err)
	}
	p := &Pod{Dir: podDir, UUID: uuid, lock: f}
	if err := p.Recover(); err != nil && p.unfinished == nil {
		// The journal itself could not be read.
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close releases pod.lck.
func (p *Pod) Close() { p.lock.Close() }

// entry runs one of the stage1's app entry points as stage0 does: a child
// with cwd = the pod directory and only the crossing variables set. The
// entry point, and the enter entry point the crossing variables name, are
// those the pod's stage1 manifest declares, resolved in its rootfs.
func (p *Pod) entry(ep string, args ...string) (int, string, error) {
	s1, err := entrypoint.ReadPod(p.Dir)
	if err != nil {
		return 0, "", fmt.Errorf("app/%s: %w", ep, err)
	}
	_, enter, err := s1.ResolvePod(layout.AnnEnter, p.Dir)
	if err != nil {
		return 0, "", fmt.Errorf("app/%s: %w", ep, err)
	}
	path, argv0, err := s1.ResolvePod(appAnnotation(ep), p.Dir)
	if err != nil {
		return 0, "", fmt.Errorf("app/%s: %w", ep, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Args[0] = argv0
	cmd.Dir = p.Dir
	cmd.Env = []string{"RKT_STAGE1_ENTERCMD=" + enter,
		"RKT_STAGE1_ENTERPID=" + readPid(p.Dir), "PATH=" + os.Getenv("PATH")}
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out), nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("app/%s: %w", ep, err)
	}
	return 0, string(out), nil
}

// appAnnotation names the annotation of the app entry point op.
func appAnnotation(op string) string {
	switch op {
	case "add":
		return layout.AnnAppAdd
	case "start":
		return layout.AnnAppStart
	case "stop":
		return layout.AnnAppStop
	case "rm":
		return layout.AnnAppRm
	}
	return "coreos.com/rkt/stage1/app/" + op
}

// readPid is the pod's PID 1 for RKT_STAGE1_ENTERPID, as rkt's stage0
// passes it, once podpid has checked it: empty if it cannot be.
func readPid(dir string) string {
	pid1, err := podpid.Open(dir)
	if err != nil {
		return ""
	}
	pid1.Close()
	return strconv.Itoa(pid1.Pid)
}

// codeNotRunning is app/stop's exit code for an app that was not running
// in pod1's stage1s before 2026-12-01 (and systemctl's): nothing to stop,
// as today's exit 0. Pods of those stage1s run on after an upgrade.
const codeNotRunning = 5

func (p *Pod) call(ep string, args ...string) error {
	code, out, err := p.entry(ep, args...)
	if err != nil {
		return err
	}
	switch {
	case code == 0:
		return nil
	case code == codeNotRunning && ep == "stop":
		return nil
	}
	return fmt.Errorf("app/%s exited %d: %s", ep, code, firstLine(out))
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

// readManifest and writeManifest read and atomically replace the pod
// manifest, as stage0 does (a temp file renamed into place).
func (p *Pod) readManifest() (*schema.PodManifest, error) {
	b, err := safefile.ReadRegularIn(p.Dir, layout.PodManifest, layout.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("pod manifest: %w", err)
	}
	var pm schema.PodManifest
	if err := pm.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("pod manifest: %w", err)
	}
	return &pm, nil
}

func (p *Pod) writeManifest(pm *schema.PodManifest) error {
	b, err := json.Marshal(pm)
	if err != nil {
		return fmt.Errorf("pod manifest: %w", err)
	}
	return safefile.WriteFile(filepath.Join(p.Dir, layout.PodManifest), b, 0o640, safefile.Durable)
}

// dropFromManifest removes the app from the pod manifest, if there.
func (p *Pod) dropFromManifest(name string) error {
	pm, err := p.readManifest()
	if err != nil {
		return err
	}
	an, err := types.NewACName(name)
	if err != nil {
		return err
	}
	if pm.Apps.Get(*an) == nil {
		return nil
	}
	keep := schema.AppList{}
	for _, a := range pm.Apps {
		if a.Name != *an {
			keep = append(keep, a)
		}
	}
	pm.Apps = keep
	return p.writeManifest(pm)
}

func (p *Pod) marker(name, suffix string) string {
	return filepath.Join(p.Dir, layout.StatusDir, name+suffix)
}

func touch(path string) error {
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	return f.Close()
}
