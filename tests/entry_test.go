package tests

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
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
			r := runPod(t, p, RunOpts{})
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
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
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

// T-ENTRY-3: stop signals only the pod's own PID 1. A pid file naming a
// host process, or the init of another pid namespace, or an app of the
// pod, is refused and the process is not signalled.
func TestStopSignalsOnlyThePodsPID1(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{})
	pid1 := podPid(t, p)
	app := appPid(t, p, "a")

	host := exec.Command("sleep", "60")
	must(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	ns := exec.Command("unshare", "--pid", "--fork", "sleep", "60")
	must(t, ns.Start())
	t.Cleanup(func() { _ = ns.Process.Kill(); _ = ns.Wait() })
	var nsInit int
	waitFor(t, 10*time.Second, "unshare's child", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ns.Process.Pid, ns.Process.Pid))
		f := strings.Fields(string(b))
		if len(f) == 1 {
			nsInit, _ = strconv.Atoi(f[0])
		}
		return nsInit > 0
	})

	pidFile := filepath.Join(p.Dir, layout.Pid)
	for _, v := range []struct {
		name string
		pid  int
	}{{"host process", host.Process.Pid}, {"other namespace's init", nsInit}, {"app", app}} {
		must(t, os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", v.pid)), 0o644))
		code, out := stopEntry(t, p)
		if code != 254 || !strings.Contains(out, "not") {
			t.Errorf("stop with the pid of the %s: %d %q", v.name, code, out)
		}
		if signalled(v.pid, unix.SIGTERM) {
			t.Errorf("stop signalled the %s", v.name)
		}
	}
	must(t, os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", pid1)), 0o644))
	if code, out := stopEntry(t, p); code != 0 {
		t.Fatalf("stop: %d %s", code, out)
	}
	if got := r.Wait(t); got != 0 && got != 143 {
		t.Errorf("pod exit %d", got)
	}
}

// signalled reports whether the process is dead or has sig pending: a
// signal sent before we looked is one or the other.
func signalled(pid int, sig unix.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	bit := uint64(1) << (uint(sig) - 1)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if n, err := strconv.ParseUint(v, 16, 64); err == nil && n&bit != 0 {
				return true
			}
		}
	}
	return false
}

// stopEntry runs the stage1's stop entry point as stage0 does, bounded.
func stopEntry(t *testing.T, p *Pod, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
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

// T-ENTRY-4: a second pod run with the UUID of a running pod is refused,
// and the running pod is untouched. The pod's cgroups are named after its
// UUID; the second run shared them and killed the first pod when it
// removed them.
func TestSecondRunWithARunningPodsUUIDIsRefused(t *testing.T) {
	a := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	ra := start(t, a, RunOpts{})
	app := appPid(t, a, "a")
	if len(cgroupDirs(a)) == 0 {
		t.Skip("the pod got no cgroups on this host")
	}
	b := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
	b.UUID = a.UUID
	rb := runPod(t, b, RunOpts{})
	if rb.Code != 254 || !strings.Contains(rb.Stderr.String(), "UUID "+a.UUID+": ") || rb.Stdout.Len() != 0 {
		t.Errorf("second run: exit %d, stdout %q, stderr %q", rb.Code, rb.Stdout, rb.Stderr)
	}
	if signalled(app, unix.SIGKILL) || signalled(app, unix.SIGTERM) {
		t.Fatal("the running pod's app was killed")
	}
	if rec := recState(t, a, "a"); rec != "running" {
		t.Errorf("the running pod's app is %s", rec)
	}
	if code, out := stopEntry(t, a); code != 0 {
		t.Fatalf("stop: %d %s", code, out)
	}
	if got := ra.Wait(t); got != 0 && got != 143 {
		t.Errorf("pod exit %d", got)
	}
	if code, err := status.Read(a.statusDir(), "a"); err != nil || code != 143 {
		t.Errorf("app status %d, %v; want 143", code, err)
	}
}

// T-ENTRY-5: pod1 run unpacks an ACI file within bounds (--image-max-files,
// --image-max-size): an image beyond them is refused with one line naming
// it, and nothing is left behind (no store entry, no pod).
func TestRunRefusesAnImageBeyondItsBounds(t *testing.T) {
	src := probeACIDir(t)
	m, err := os.ReadFile(filepath.Join(src, "manifest"))
	must(t, err)
	aci := filepath.Join(t.TempDir(), "many.aci")
	f, err := os.OpenFile(aci, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	must(t, err)
	tw := tar.NewWriter(f)
	add := func(h *tar.Header, body []byte) {
		h.Size = int64(len(body))
		must(t, tw.WriteHeader(h))
		_, err := tw.Write(body)
		must(t, err)
	}
	add(&tar.Header{Name: "manifest", Typeflag: tar.TypeReg, Mode: 0o644}, m)
	add(&tar.Header{Name: "rootfs/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	for i := 0; i < 100; i++ {
		add(&tar.Header{Name: fmt.Sprintf("rootfs/f%d", i), Typeflag: tar.TypeReg, Mode: 0o644}, make([]byte, 4096))
	}
	must(t, tw.Close())
	must(t, f.Close())
	for _, c := range []struct{ flag, want string }{
		{"--image-max-files=50", "more than 50 entries"},
		{"--image-max-size=200K", "more than 204800 bytes"},
	} {
		t.Run(c.flag, func(t *testing.T) {
			data := dataDir(t)
			// The stage1 as an ACI directory: the bounds apply to every
			// ACI file, and the stage1's is bigger than this image.
			s1 := filepath.Join(filepath.Dir(stage1ACI(t)), "stage1")
			_, errOut, code := pod1(t, data, "run", c.flag, "--stage1-path="+s1, aci)
			line := strings.TrimSuffix(errOut, "\n")
			if code != 254 || strings.Contains(line, "\n") || !strings.Contains(line, aci) || !strings.Contains(line, c.want) {
				t.Errorf("pod1 run %s: exit %d, stderr %q", c.flag, code, errOut)
			}
			for _, d := range []string{"pods/run", "pods/prepare", "pods/embryo"} {
				if ents, _ := os.ReadDir(filepath.Join(data, d)); len(ents) != 0 {
					t.Errorf("left in %s: %v", d, ents)
				}
			}
			ents, _ := os.ReadDir(filepath.Join(data, "pod1/images"))
			for _, e := range ents {
				if b, _ := os.ReadFile(filepath.Join(data, "pod1/images", e.Name(), "manifest")); bytes.Equal(b, m) || strings.HasPrefix(e.Name(), ".tmp-") {
					t.Errorf("store entry of the refused image left: %s", e.Name())
				}
			}
		})
	}
}
