package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/layout"
	"golang.org/x/sys/unix"
)

// bgPod is a pod started by `pod1 run` in the background.
type bgPod struct {
	UUID   string
	Dir    string // where pod1 run put it (pods/run/<uuid>)
	Cmd    *exec.Cmd
	Stderr *bytes.Buffer
	Stdout *bytes.Buffer
	done   chan struct{}
	Code   int
}

// runBG starts `pod1 run --dir=data ... ARGS` and waits for its UUID.
func runBG(t *testing.T, data string, args ...string) *bgPod {
	t.Helper()
	return runBGWith(t, data, nil, args...)
}

// runBGWith is runBG with setup applied to the command before it starts
// (its stdio, its session).
func runBGWith(t *testing.T, data string, setup func(*exec.Cmd), args ...string) *bgPod {
	t.Helper()
	uuidFile := filepath.Join(t.TempDir(), "uuid")
	full := []string{"run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--uuid-file-save=" + uuidFile}
	if !hasNetFlag(args) {
		full = append(full, "--net=none")
	}
	full = append(full, args...)
	// The pod lives until the test stops it, or the cleanup cancels it.
	ctx, cancel := context.WithCancel(context.Background())
	p := &bgPod{Cmd: exec.CommandContext(ctx, bin("pod1"), full...), Stderr: &bytes.Buffer{}, Stdout: &bytes.Buffer{}, done: make(chan struct{})}
	p.Cmd.Stderr, p.Cmd.Stdout = p.Stderr, p.Stdout
	p.Cmd.WaitDelay = time.Second
	if setup != nil {
		setup(p.Cmd)
	}
	must(t, p.Cmd.Start())
	go func() {
		_ = p.Cmd.Wait()
		p.Code = p.Cmd.ProcessState.ExitCode()
		if ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.Code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	deadline := time.Now().Add(eventDeadline)
	for {
		b, err := os.ReadFile(uuidFile)
		if err == nil && len(b) > 0 {
			p.UUID = strings.TrimSpace(string(b))
			ownPod(p.UUID)
			break
		}
		select {
		case <-p.done:
			t.Fatalf("pod1 run exited %d before saving its UUID: %s", p.Code, p.Stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("pod1 run never saved its UUID")
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.Dir = filepath.Join(data, "pods/run", p.UUID)
	return p
}

// hasNetFlag reports whether pod1 run arguments choose the networks.
func hasNetFlag(args []string) bool {
	for _, a := range args {
		if a == "--" || a == "---" {
			return false
		}
		if strings.HasPrefix(a, "--net=") {
			return true
		}
	}
	return false
}

// wait waits for pod1 run to exit and returns its code.
func (p *bgPod) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(eventDeadline):
		t.Fatalf("pod %s did not end", p.UUID)
	}
	return p.Code
}

// waitPid waits for the pod's pid file, as rkt enter does.
func (p *bgPod) waitPid(t *testing.T) int {
	t.Helper()
	return podPid(t, &Pod{Dir: p.Dir, UUID: p.UUID})
}

// pod1 runs the pod1 CLI, bounded, and returns its output and exit code.
func pod1(t *testing.T, data string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return pod1Within(t, eventDeadline, data, args...)
}

// pod1Within is pod1 with a deadline of d, for commands whose work grows
// with what the test made.
func pod1Within(t *testing.T, d time.Duration, data string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin("pod1"), append([]string{"--dir=" + data}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("pod1 %v timed out", args)
	}
	code = 0
	if err != nil {
		code = -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
	}
	return o.String(), e.String(), code
}

// mountsUnder lists the mount points below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	m, err := launch.MountsUnder(dir)
	must(t, err)
	return m
}

// podDirs lists the pod directories in every state directory of data.
func podDirs(t *testing.T, data string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range []string{"embryo", "prepare", "prepared", "run", "exited-garbage", "garbage"} {
		ents, _ := os.ReadDir(filepath.Join(data, "pods", s))
		for _, e := range ents {
			out[e.Name()] = s
		}
	}
	return out
}

// fakePod lays out a pod directory as stage0 and our stage1 leave one:
// manifest, pod-created, stage1 manifest and gc entrypoint, a pid file
// when it ran, and a status file per app with a code (>= 0).
func fakePod(t *testing.T, data, state string, codes map[string]int, ran bool) string {
	t.Helper()
	uuid := newUUID(t)
	dir := filepath.Join(data, "pods", state, uuid)
	s1 := filepath.Join(dir, layout.Stage1RootFS)
	must(t, os.MkdirAll(filepath.Join(s1, layout.StatusDirIn), 0o755))
	var apps []App
	for name, code := range codes {
		apps = append(apps, App{Name: name, Exec: probe("exit", "0")})
		if code >= 0 {
			must(t, os.WriteFile(filepath.Join(s1, layout.StatusDirIn, name), []byte(fmt.Sprintf("%d\n", code)), 0o644))
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, layout.PodManifest), manifest(apps, nil), 0o640))
	must(t, os.WriteFile(filepath.Join(dir, layout.PodCreated), nil, 0o640))
	m, err := os.ReadFile(filepath.Join(repoRoot, "rootfs/manifest.json"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, layout.Stage1Manifest), m, 0o640))
	// As in the image: the binary in the rootfs, entrypoints relative
	// symlinks to it (gc resolves them inside the rootfs).
	linkOrCopy(t, bin("stage1-init"), filepath.Join(s1, "stage1-init"))
	for _, ep := range []string{"gc", "stop", "enter"} {
		must(t, os.Symlink("stage1-init", filepath.Join(s1, ep)))
	}
	if ran {
		must(t, os.WriteFile(filepath.Join(dir, layout.Pid), []byte("99999\n"), 0o644))
	}
	return uuid
}

// holdLock takes a pod directory's exclusive lock, as a stage1 (or stage0
// preparing it) does, until the test ends or release is called.
func holdLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	must(t, unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB))
	closed := false
	release = func() {
		if !closed {
			closed = true
			unix.Close(fd)
		}
	}
	t.Cleanup(release)
	return release
}

// jsonOf decodes s into v or fails the test.
func jsonOf(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}
