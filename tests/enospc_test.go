package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/status"
)

// T-STATUS-ENOSPC: an app that fills the file system the status directory
// is on does not cost another app its final status. The status directory
// and a volume both apps share are on one small tmpfs; "filler" fills it,
// then "late" exits: its status and record are written and correct, and
// so are the filler's when the pod stops.
func TestFinalStatusesSurviveAFullDisk(t *testing.T) {
	fs := t.TempDir()
	must(t, unix.Mount("tmpfs", fs, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"))
	t.Cleanup(func() { _ = unix.Unmount(fs, unix.MNT_DETACH) })
	for _, d := range []string{"status", "fill"} {
		must(t, os.Mkdir(filepath.Join(fs, d), 0o755))
	}
	apps := []App{
		// The filler fills only once late runs (late's blocks are
		// reserved when it starts, as every app's are): with no order,
		// a fast filler would fill the disk before late is started.
		{Name: "filler", Exec: probe("wait-file", "/fill/late-runs", "+", "fill", "/fill/big", "+", "touch", "/fill/done", "+", "sleep", "1h"),
			Mounts: []map[string]any{{"volume": "fill", "path": "/fill"}}},
		{Name: "late", Exec: probe("touch", "/fill/late-runs", "+", "wait-file", "/fill/done", "+", "exit", "3"),
			Mounts: []map[string]any{{"volume": "fill", "path": "/fill"}}},
	}
	p := newPod(t, apps, []map[string]any{{"name": "fill", "kind": "host", "source": filepath.Join(fs, "fill")}})
	must(t, unix.Mount(filepath.Join(fs, "status"), p.statusDir(), "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(p.statusDir(), unix.MNT_DETACH) })
	r := start(t, p, RunOpts{Args: []string{"--net=none", "--debug"}})
	waitFor(t, 20*time.Second, "late's status", func() bool {
		_, err := os.Lstat(filepath.Join(p.statusDir(), "late"))
		select {
		case <-r.done:
			return true
		default:
		}
		return err == nil
	})
	if !strings.Contains(r.Stdout.String(), "fill full") {
		t.Fatalf("the file system was not filled: %q", r.Stdout)
	}
	if code, err := status.Read(p.statusDir(), "late"); err != nil || code != 3 {
		t.Errorf("late's status: %d, %v; want 3", code, err)
	}
	rec, err := status.ReadRecord(p.statusDir(), "late")
	if err != nil || rec.State != status.StateExited || rec.ExitCode == nil || *rec.ExitCode != 3 {
		t.Errorf("late's record: %+v, %v", rec, err)
	}
	if code, out := stopEntry(t, p); code != 0 {
		t.Fatalf("stop: %d %s", code, out)
	}
	r.Wait(t)
	// Stopped by the pod after late failed: its status file says 0, as
	// rkt's stage1 wrote it (TestExitCodeWithSeveralApps); its record
	// keeps the SIGTERM that ended it.
	if code, err := status.Read(p.statusDir(), "filler"); err != nil || code != 0 {
		t.Errorf("filler's status: %d, %v; want 0", code, err)
	}
	if rec, err := status.ReadRecord(p.statusDir(), "filler"); err != nil || rec.ExitCode == nil || *rec.ExitCode != 143 {
		t.Errorf("filler's record: %+v, %v", rec, err)
	}
	if t.Failed() {
		t.Logf("stage1 stderr:\n%s", r.Stderr)
	}
}
