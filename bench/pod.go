package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// A pod directory laid out as rkt's stage0 leaves it for the stage1's run
// entry point (contract §5), after tests/harness_test.go's newPodRaw: the
// pod manifest, a stage1 rootfs whose entry points are our binary, and one
// rootfs per app made of hard links to the bench's fixture files, so that
// preparing a pod costs a few dozen inode operations outside the timing.

// podApp is one app of a bench pod.
type podApp struct {
	name string
	exec []string
	ann  map[string]string
}

// podOpts are a bench pod's settings beyond its apps.
type podOpts struct {
	// ann are the pod manifest's annotations (besides mutable=false).
	ann map[string]string
	// repo, if set, is another pod1 tree whose binaries run the pod
	// (-vs), in place of the bench's own -repo.
	repo string
	// env is added to the run entry point's environment (the start
	// tricks turned off: starttricks.Env).
	env []string
}

// pod is a prepared pod directory.
type pod struct {
	dir, uuid string
	apps      []podApp
	env       []string
}

func newUUID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/uuid")
	return strings.TrimSpace(string(b)), err
}

func annotations(m map[string]string) []map[string]string {
	out := []map[string]string{}
	for k, v := range m {
		out = append(out, map[string]string{"name": k, "value": v})
	}
	return out
}

func podManifest(apps []podApp, podAnn map[string]string) ([]byte, error) {
	var as []map[string]any
	for _, a := range apps {
		ra := map[string]any{
			"name":  a.name,
			"image": map[string]any{"name": "pod1.dev/bench", "id": "sha512-" + strings.Repeat("0", 64)},
			"app": map[string]any{
				"exec": a.exec, "user": "0", "group": "0",
				"environment": []any{}, "workingDirectory": "/",
			},
		}
		if a.ann != nil {
			ra["annotations"] = annotations(a.ann)
		}
		as = append(as, ra)
	}
	ann := annotations(podAnn)
	ann = append(ann, map[string]string{"name": layout.AnnMutable, "value": "false"})
	return json.Marshal(map[string]any{
		"acVersion": "1.30.0", "acKind": "PodManifest", "apps": as,
		"volumes": []any{}, "isolators": nil,
		"annotations": ann,
		"ports":       []any{},
	})
}

var imageManifestJSON = []byte(`{"acKind":"ImageManifest","acVersion":"0.8.11","name":"pod1.dev/bench",` +
	`"labels":[{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],` +
	`"app":{"exec":["/true"],"user":"0","group":"0"}}`)

// newPod prepares a pod directory under the bench's work dir.
func (b *bench) newPod(apps []podApp) (*pod, error) { return b.newPodOpts(apps, podOpts{}) }

// newPodOpts is newPod with pod-level settings.
func (b *bench) newPodOpts(apps []podApp, o podOpts) (*pod, error) {
	uuid, err := newUUID()
	if err != nil {
		return nil, err
	}
	p := &pod{dir: filepath.Join(b.work, "pods", uuid), uuid: uuid, apps: apps, env: o.env}
	s1 := filepath.Join(p.dir, layout.Stage1RootFS)
	for _, d := range []string{layout.StatusDirIn, layout.EnvDirIn, layout.Stage2DirIn} {
		if err := os.MkdirAll(filepath.Join(s1, d), 0o755); err != nil {
			return nil, err
		}
	}
	stage1Init, repo := b.stage1Init, b.repo
	if o.repo != "" {
		stage1Init, repo = filepath.Join(o.repo, "bin/stage1-init"), o.repo
	}
	for _, ep := range []string{"stop", "gc"} {
		if err := os.Symlink(stage1Init, filepath.Join(s1, ep)); err != nil {
			return nil, err
		}
	}
	// The run entry point is the waiter, as in the image; a tree from
	// before the waiter (-vs, a step of bench-ab) has only stage1-init.
	run := stage1Init
	w := filepath.Join(repo, "bin/pod1-waiter")
	if _, err := os.Stat(w); err == nil {
		run = w
	}
	if err := os.Symlink(run, filepath.Join(s1, "run")); err != nil {
		return nil, err
	}
	m, err := podManifest(apps, o.ann)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.dir, layout.PodManifest), m, 0o640); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.dir, layout.PodCreated), nil, 0o644); err != nil {
		return nil, err
	}
	for _, a := range apps {
		if err := linkTree(b.fixture, filepath.Join(p.dir, layout.AppRootfs(a.name))); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(p.dir, layout.AppManifest(a.name)), imageManifestJSON, 0o644); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// linkTree recreates the directories of src under dst and hard-links
// everything else (files, FIFOs); symlinks are copied.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			st, err := os.Stat(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return os.Chmod(target, st.Mode().Perm()|st.Mode()&os.ModeSticky)
		case d.Type()&os.ModeSymlink != 0:
			l, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		default:
			return os.Link(path, target)
		}
	})
}

// startPod execs the pod's run entry point as stage0 does: cwd the pod
// dir, the pod directory flock'd exclusively on an inherited fd named by
// RKT_LOCK_FD, argv --net=none UUID. Our copy of the lock fd is closed at
// once, as stage0 keeps none (it execs the stage1).
func (b *bench) startPod(p *pod) (*child, error) { return b.startPodNet(p, "--net=none") }

// startPodNet is startPod with the given --net argument.
func (b *bench) startPodNet(p *pod, net string) (*child, error) {
	lock, err := os.Open(p.dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, err
	}
	run := filepath.Join(p.dir, layout.Stage1RootFS, "run")
	return start(spec{
		argv:  []string{run, net, p.uuid},
		dir:   p.dir,
		env:   append(append(os.Environ(), "RKT_LOCK_FD=3"), p.env...),
		files: []*os.File{lock},
		sys:   &syscall.SysProcAttr{},
	})
}

// newStartedPod prepares a pod of apps and starts it (startPod). The
// caller closes the child.
func (b *bench) newStartedPod(apps []podApp) (*pod, *child, error) {
	return b.newStartedPodOpts(apps, podOpts{})
}

// newStartedPodOpts is newStartedPod with pod-level settings.
func (b *bench) newStartedPodOpts(apps []podApp, o podOpts) (*pod, *child, error) {
	p, err := b.newPodOpts(apps, o)
	if err != nil {
		return nil, nil, err
	}
	c, err := b.startPod(p)
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

// runPodToEnd starts a prepared pod and waits for it to end, which must
// be with 0 and every app's status 0. The caller closes the child (on
// success) and reads its timings.
func (b *bench) runPodToEnd(p *pod, timeout time.Duration) (*child, error) {
	return b.runPodToEndNet(p, "--net=none", timeout)
}

// status reads an app's exit status as rkt does.
func (p *pod) status(app string) (int, error) {
	b, err := os.ReadFile(filepath.Join(p.dir, layout.StatusDir, app))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// pid1 is the pod's PID 1 as a host pid, from the pid file.
func (p *pod) pid1(timeout time.Duration) (int, error) {
	var pid int
	err := waitUntil(timeout, 200*time.Microsecond, "the pid file", func() bool {
		b, err := os.ReadFile(filepath.Join(p.dir, layout.Pid))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid, err
}

// checkStatuses verifies every app has a status; want < 0 accepts any.
func (p *pod) checkStatuses(want int) error {
	for _, a := range p.apps {
		got, err := p.status(a.name)
		if err != nil {
			return fmt.Errorf("pod %s: app %s: no status: %w", p.uuid, a.name, err)
		}
		if want >= 0 && got != want {
			return fmt.Errorf("pod %s: app %s: status %d, want %d", p.uuid, a.name, got, want)
		}
	}
	return nil
}

// finishPod collects the pod as rkt gc would (its gc entry point removes
// the cgroups the pod leaves, emptied, until then), checks that nothing of
// its cgroups is left, and removes its directory. It is outside every
// timing.
func (b *bench) finishPod(p *pod) error {
	// Through start/run, never os/exec: the bench's reaper waits for
	// any child (wait4(-1)) and would take the exit os/exec's Wait is
	// waiting for ("waitid: no child processes").
	var gcErr error
	c, err := b.gcPod(p)
	if c != nil {
		c.close()
	}
	if err != nil {
		gcErr = fmt.Errorf("pod %s: gc: %w", p.uuid, err)
	}
	left, findErr := cgroups.Named(cgroups.PodName(p.uuid))
	err = errors.Join(gcErr, findErr, os.RemoveAll(p.dir))
	if len(left) > 0 {
		b.leftovers = append(b.leftovers, left...)
		return errors.Join(err, fmt.Errorf("pod %s left cgroups: %s", p.uuid, strings.Join(left, " ")))
	}
	return err
}

// cgroupsNamed finds cgroup directories with this name in any hierarchy,
// at any depth (cgroups.Named; what it could not read is not listed).
func cgroupsNamed(name string) []string {
	dirs, _ := cgroups.Named(name)
	return dirs
}
