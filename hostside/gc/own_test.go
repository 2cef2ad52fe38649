package gc

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// selfBuildID is the test binary's Go build ID as the go tool reads it.
func selfBuildID(t *testing.T) (exe, id string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	return exe, strings.TrimSpace(string(out))
}

func TestGoBuildID(t *testing.T) {
	exe, want := selfBuildID(t)
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := f.ReadAt(head, 0)
	if got, err := goBuildID(head[:n]); err != nil || got != want {
		t.Fatalf("goBuildID = %q, %v; the go tool says %q", got, err, want)
	}
	for name, b := range map[string][]byte{
		"empty":      nil,
		"not ELF":    []byte(strings.Repeat("#!/bin/sh\n", 100)),
		"truncated":  head[:200],
		"big-endian": append([]byte("\x7fELF\x02\x02"), head[6:n]...),
	} {
		if id, err := goBuildID(b); err == nil {
			t.Errorf("%s: build ID %q", name, id)
		}
	}
}

// ownPod makes a pod directory whose stage1's gc entry point is a copy
// of the test binary.
func ownPod(t *testing.T, exe string) string {
	t.Helper()
	dir := t.TempDir()
	mkdirs(t, filepath.Join(dir, layout.Stage1RootFS, "rkt/pod1"))
	manifest := `{"annotations":[{"name":"coreos.com/rkt/stage1/gc","value":"/gc"},{"name":"coreos.com/rkt/stage1/interface-version","value":"6"}]}`
	if err := os.WriteFile(filepath.Join(dir, layout.Stage1Manifest), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, layout.Stage1RootFS, "gc"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOwnStage1Recognised(t *testing.T) {
	exe, id := selfBuildID(t)
	dir := ownPod(t, exe)
	ep := filepath.Join(dir, layout.Stage1RootFS, "gc")
	for _, tc := range []struct {
		own  string
		want bool
	}{{id, true}, {id[:len(id)-1] + "x", false}, {"", false}} {
		ownStage1BuildID = tc.own
		c := &collector{}
		if got := c.isOwnStage1(ep) && tc.own != ""; got != tc.want {
			t.Errorf("build ID %q: own = %v, want %v", tc.own, got, tc.want)
		}
	}
	ownStage1BuildID = ""
}

// The gc of a pod of our own stage1 kills what is left in the pod's
// cgroup and removes it in this process: executing the entry point here
// (the test binary) would fail. The cgroup has the name this stage1 gives
// it, or the one an older pod1 stage1 gave it (a pod of the old stage1
// collected by the new).
func TestOwnStage1GCInProcess(t *testing.T) {
	for name, cgName := range map[string]func(string) string{"current": cgroups.PodName, "legacy": cgroups.LegacyPodName} {
		t.Run(name, func(t *testing.T) { ownStage1GCInProcess(t, cgName) })
	}
}

func ownStage1GCInProcess(t *testing.T, cgName func(string) string) {
	if os.Getuid() != 0 {
		t.Skip("needs root: makes a cgroup")
	}
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil || len(infos) == 0 {
		t.Skipf("no cgroup2 mount: %v", err)
	}
	exe, id := selfBuildID(t)
	ownStage1BuildID = id
	defer func() { ownStage1BuildID = "" }()
	dir := ownPod(t, exe)
	cg := filepath.Join(infos[0].Mountpoint, cgName(uuid))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	sleeper := exec.Command("sleep", "1h")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = sleeper.Wait(); close(done) }() // killed: its status does not matter
	// Before the cgroup's removal (cleanups run last first), and waited
	// for: a cgroup that still holds it cannot be removed.
	t.Cleanup(func() { _ = sleeper.Process.Kill(); <-done })
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"v2": cg})
	if err := os.WriteFile(filepath.Join(dir, layout.CgroupsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &collector{o: Options{Stage1Timeout: time.Minute}}
	if err := c.stage1GC(uuid, dir); err != nil {
		t.Fatalf("stage1 gc: %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process in the pod's cgroup was not killed")
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pod's cgroup is left: %v", err)
	}
}
