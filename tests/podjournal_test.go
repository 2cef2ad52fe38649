package tests

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/layout"
)

// journalctlJSON runs the host's journalctl with args, bounded, and
// returns its entries.
func journalctlJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	bin, err := exec.LookPath("journalctl")
	if err != nil {
		t.Fatalf("no journalctl (package systemd, tools/host-deps.sh): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"-o", "json", "--no-pager"}, args...)...).Output()
	if err != nil {
		t.Fatalf("journalctl %s: %v", strings.Join(args, " "), err)
	}
	var es []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("journalctl: %v: %s", err, l)
		}
		es = append(es, e)
	}
	return es
}

// pod1/pod-journal=yes gives the pod a journal of its own, as rkt's
// stage1's journald did: while the pod runs, journalctl reads it below
// PID 1's root as journalctl -M rkt-<uuid> does (machined opens the
// leader's root; --root reads it the same way, as an OS tree), and after
// the pod, in the stage1's /var/log/journal/<machine id>, the directory
// the host's /var/log/journal links to. Each line is an entry of its
// app (SYSLOG_IDENTIFIER, journalctl -t) from the pod's machine, its
// hostname and the host's boot. Without the annotation, on a host that
// systemd did not boot, the pod has none; a value of the annotation
// that is none of auto, yes and no refuses the pod before it starts. Where the host keeps a
// persistent journal, /var/log/journal/<machine id> links to the pod's
// until the gc entry point removes the link.
func TestPodJournal(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd booted this host: every pod has its journal (the systemd VM's tests)")
	}
	apps := []App{
		{Name: "web", Exec: probe("raw", "1", "hello\nworld\n", "+", "raw", "2", "oops\n", "+", "wait-file", "/tmp/go")},
	}
	p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/pod-journal": "yes"}), apps)
	r := start(t, p, RunOpts{})
	pid := podPid(t, p)
	mid := layout.MachineID(p.UUID)
	root := "/proc/" + strconv.Itoa(pid) + "/root"
	var es []map[string]any
	waitFor(t, eventDeadline, "the app's lines in the journal below PID 1's root", func() bool {
		es = journalctlJSON(t, "--root="+root, "SYSLOG_IDENTIFIER=web")
		return len(es) == 3
	})
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	must(t, err)
	want := map[string]string{"_MACHINE_ID": mid, "_HOSTNAME": "rkt-" + p.UUID, "_BOOT_ID": strings.ReplaceAll(strings.TrimSpace(string(boot)), "-", ""),
		"POD1_APP": "web", "_TRANSPORT": "stdout"}
	byMsg := map[any]map[string]any{}
	for _, e := range es {
		byMsg[e["MESSAGE"]] = e
	}
	for msg, prio := range map[string]string{"hello": "6", "world": "6", "oops": "3"} {
		e := byMsg[msg]
		if e == nil {
			t.Errorf("no entry %q: %v", msg, es)
			continue
		}
		want["PRIORITY"] = prio
		for k, v := range want {
			if e[k] != v {
				t.Errorf("entry %q: %s=%v, want %s", msg, k, e[k], v)
			}
		}
	}
	must(t, os.WriteFile(filepath.Join(p.Dir, layout.AppRootfs("web"), "tmp/go"), nil, 0o644))
	if code := r.Wait(t); code != 0 {
		t.Fatalf("pod exited %d: %s", code, r.Stderr)
	}
	dir := filepath.Join(p.Dir, layout.PodJournalDir, mid)
	bin, _ := exec.LookPath("journalctl")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "--verify", "--directory="+dir).CombinedOutput(); err != nil {
		t.Errorf("journalctl --verify of the pod's journal: %v\n%s", err, out)
	}
	if es := journalctlJSON(t, "--directory="+dir, "-t", "web"); len(es) != 3 {
		t.Errorf("after the pod: %d entries of web, want 3", len(es))
	}
	// Where the host keeps a persistent journal, it links to the pod's
	// until gc.
	link := filepath.Join(layout.HostJournalDir, mid)
	if _, err := os.Stat(layout.HostJournalDir); err == nil {
		if got, err := os.Readlink(link); err != nil || got != dir {
			t.Errorf("%s: %q, %v; want a link to %s", link, got, err, dir)
		}
		gc := exec.CommandContext(ctx, filepath.Join(p.Dir, layout.Stage1RootFS, "gc"), p.UUID)
		gc.Dir = p.Dir
		if out, err := gc.CombinedOutput(); err != nil {
			t.Fatalf("gc entry point: %v: %s", err, out)
		}
		if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after gc: %v", link, err)
		}
	}

	bad := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/pod-journal": "on"}), apps)
	if r := runPod(t, bad, RunOpts{}); r.Code != 254 || !strings.Contains(r.Stderr.String(),
		`pod manifest: annotations: annotation pod1/pod-journal: "on" is not one of auto, yes, no`) {
		t.Errorf("pod1/pod-journal=on: exit %d, want 254 naming it\n%s", r.Code, r.Stderr)
	}

	plain := newPod(t, []App{{Name: "a", Exec: probe("raw", "1", "x\n")}}, nil)
	if code := runPod(t, plain, RunOpts{}).Code; code != 0 {
		t.Fatalf("pod without the annotation exited %d", code)
	}
	if _, err := os.Stat(filepath.Join(plain.Dir, layout.PodJournalDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a pod on a host systemd did not boot has a journal: %v", err)
	}
}
