package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// T-ENTRY-1: a pod file that is not a regular file (a FIFO, a symlink) is
// refused with one line, never waited on: opening a FIFO blocks until a
// writer comes, which never does.
func TestPodFilesThatAreNotRegularAreRefused(t *testing.T) {
	cases := []struct {
		name, file string
		plant      func(t *testing.T, path string)
		want       string
	}{
		{"pod-manifest-fifo", layout.PodManifest, mkfifo, "pod manifest: pod: not a regular file"},
		{"image-manifest-fifo", layout.AppManifest("a"), mkfifo, `app "a": image manifest: ` + layout.AppManifest("a") + ": not a regular file"},
		{"pod-manifest-symlink", layout.PodManifest, symlinkToCopy, "pod manifest: open pod: "},
		{"image-manifest-symlinked-dir", layout.AppManifest("a"), symlinkedParent, `app "a": image manifest: open ` + layout.AppManifest("a")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{okApp("a")}, nil)
			c.plant(t, filepath.Join(p.Dir, c.file))
			r := runPod(t, p, RunOpts{Timeout: 20 * time.Second})
			assertRefused(t, p, r, c.want)
		})
	}
}

func mkfifo(t *testing.T, path string) {
	must(t, os.Remove(path))
	must(t, unix.Mkfifo(path, 0o644))
}

// symlinkToCopy replaces the file by a symlink to a copy of it elsewhere.
func symlinkToCopy(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	must(t, err)
	other := filepath.Join(t.TempDir(), "copy")
	must(t, os.WriteFile(other, b, 0o644))
	must(t, os.Remove(path))
	must(t, os.Symlink(other, path))
}

// symlinkedParent moves the file's directory elsewhere and leaves a
// symlink to it.
func symlinkedParent(t *testing.T, path string) {
	dir := filepath.Dir(path)
	other := filepath.Join(t.TempDir(), "moved")
	must(t, os.Rename(dir, other))
	must(t, os.Symlink(other, dir))
}

// T-ENTRY-2: a pid file that is a FIFO makes stop fail at once instead of
// hanging.
func TestStopRefusesAFifoPidFile(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "60s")}}, nil)
	r := start(t, p, RunOpts{})
	pid := podPid(t, p)
	appPid(t, p, "a")
	pidFile := filepath.Join(p.Dir, layout.Pid)
	b, err := os.ReadFile(pidFile)
	must(t, err)
	must(t, os.Remove(pidFile))
	must(t, unix.Mkfifo(pidFile, 0o644))
	code, out := stopEntry(t, p)
	if code != 254 || !strings.Contains(out, "pid: not a regular file") {
		t.Errorf("stop with a FIFO as pid: %d %q", code, out)
	}
	must(t, os.Remove(pidFile))
	must(t, os.WriteFile(pidFile, b, 0o644))
	if code, out := stopEntry(t, p); code != 0 {
		t.Fatalf("stop: %d %s", code, out)
	}
	if got := r.Wait(t); got != 0 && got != 143 {
		t.Errorf("pod exit %d", got)
	}
	_ = pid
}

// stopEntry runs the stage1's stop entry point as stage0 does, bounded.
func stopEntry(t *testing.T, p *Pod, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.Dir, layout.Stage1RootFS, "stop"), append(args, p.UUID)...)
	cmd.Dir = p.Dir
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("stop entry point hung: %s", out)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	must(t, err)
	return 0, string(out)
}
