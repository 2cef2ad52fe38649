package tests

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/hostside/pods"
)

// probeACIDir builds an ACI directory whose app is the probe.
func probeACIDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "probe-aci")
	root := filepath.Join(d, "rootfs")
	for _, s := range []string{"bin", "etc", "tmp"} {
		must(t, os.MkdirAll(filepath.Join(root, s), 0o755))
	}
	b, err := os.ReadFile(bin("probe"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(root, "bin/probe"), b, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644))
	m, _ := json.Marshal(map[string]any{
		"acKind": "ImageManifest", "acVersion": "0.8.11", "name": "pod1.dev/probe",
		"labels": []map[string]string{{"name": "os", "value": "linux"}, {"name": "arch", "value": "amd64"}},
		"app":    map[string]any{"exec": []string{"/bin/probe", "exit", "0"}, "user": "0", "group": "0"},
	})
	must(t, os.WriteFile(filepath.Join(d, "manifest"), m, 0o644))
	return d
}

// dataDir is a throwaway rkt data directory; the overlays and cgroups
// pod1 run's pods leave (as rkt run's do, until gc) are unmounted and
// removed at the end.
func dataDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	t.Cleanup(func() {
		ownPodsUnder(d)
		gcPodCgroupsUnder(t, d)
		if err := launch.UnmountAll(d); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return d
}

func stage1ACI(t *testing.T) string {
	p := filepath.Join(repoRoot, "build/stage1.aci")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing: run make image (%v)", p, err)
	}
	return p
}

// Pods started by pod1 run read correctly with rkt's rules: running while
// the lock is held, exited after, exit codes from the status files (in the
// overlay's upper directory when the stage1 rootfs is an overlay).
func TestLauncherPodsReadWithRktRules(t *testing.T) {
	for _, noOverlay := range []bool{false, true} {
		name := "overlay"
		if noOverlay {
			name = "no-overlay"
		}
		t.Run(name, func(t *testing.T) {
			data := dataDir(t)
			img := probeACIDir(t)
			uuidFile := filepath.Join(t.TempDir(), "uuid")
			args := []string{"run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none",
				"--uuid-file-save=" + uuidFile}
			if noOverlay {
				args = append(args, "--no-overlay")
			}
			args = append(args, img, "--name=failing", "--exec=/bin/probe", "--", "sleep", "300ms", "+", "exit", "3",
				"---", img, "--name=long", "--exec=/bin/probe", "--", "sleep", "1h",
				"---", img, "--name=ok")
			cmd := exec.Command(bin("pod1"), args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			must(t, cmd.Start())
			done := make(chan struct{})
			go func() {
				_ = cmd.Wait() // the exit code is checked below
				close(done)
			}()
			var uuid string
			waitFor(t, 10*time.Second, "uuid file", func() bool {
				b, err := os.ReadFile(uuidFile)
				uuid = strings.TrimSpace(string(b))
				return err == nil && uuid != ""
			})
			waitFor(t, 10*time.Second, "pod running", func() bool {
				p, err := pods.Read(data, uuid)
				return err == nil && p.State == pods.Running
			})
			select {
			case <-done:
			case <-time.After(eventDeadline):
				_ = cmd.Process.Kill()
				t.Fatal("pod did not end")
			}
			if code := cmd.ProcessState.ExitCode(); code != 3 {
				t.Fatalf("pod1 run exited %d, want 3; stderr %s", code, stderr.String())
			}
			p, err := pods.Read(data, uuid)
			must(t, err)
			if p.State != pods.Exited {
				t.Fatalf("state %s, want exited", p.State)
			}
			// long, stopped by the pod when failing failed, records
			// 0, as with rkt's stage1.
			want := map[string]int{"failing": 3, "long": 0, "ok": 0}
			if len(p.Apps) != 3 {
				t.Fatalf("apps %+v", p.Apps)
			}
			for _, a := range p.Apps {
				if a.ExitCode == nil || *a.ExitCode != want[a.Name] {
					t.Errorf("app %s: exit code %v, want %d", a.Name, a.ExitCode, want[a.Name])
				}
			}
			if !noOverlay && !strings.Contains(p.StatusDir(), "/upper/rkt/status") {
				t.Errorf("overlay pod read from %s", p.StatusDir())
			}
		})
	}
}

func TestLauncherBadInput(t *testing.T) {
	data := dataDir(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "/nonexistent.aci"}, "/nonexistent.aci"},
		{[]string{"run", "--dir=" + data, "--bogus", probeACIDir(t)}, "bogus"},
		{[]string{"run", "--dir=" + data, "--stage1-path=/nope.aci", probeACIDir(t)}, "/nope.aci"},
		{[]string{"run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none", "--hostname=box\nevil", probeACIDir(t), "--exec=/bin/probe", "--", "exit", "0"}, "--hostname="},
		{[]string{"run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none", "--net=default", probeACIDir(t), "--exec=/bin/probe", "--", "exit", "0"}, "--net="},
		{[]string{"run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none,bad/name", probeACIDir(t), "--exec=/bin/probe", "--", "exit", "0"}, "--net"},
		{[]string{"run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none", "--hostname=a..b", probeACIDir(t), "--exec=/bin/probe", "--", "exit", "0"}, "--hostname="},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
		out, err := exec.CommandContext(ctx, bin("pod1"), c.args...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 254 {
			t.Errorf("%v: %v, want exit 254; %s", c.args, err, out)
			continue
		}
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: output %q does not name %q in one line", c.args, out, c.want)
		}
	}
	for _, state := range []string{"embryo", "prepare", "prepared", "run", "exited-garbage", "garbage"} {
		if ents, _ := os.ReadDir(filepath.Join(data, "pods", state)); len(ents) != 0 {
			t.Errorf("pods left behind in %s: %v", state, ents)
		}
	}
}
