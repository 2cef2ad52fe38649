package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/pod1/pod1/layout"
)

// Every bad isolator value is refused before anything starts: exit 254,
// one line naming the app, the isolator and the bound (threats B6).
func TestBadIsolatorsAreRefused(t *testing.T) {
	mem := func(v any) map[string]any { return isolator("resource/memory", v) }
	caps := func(kind string, set ...string) map[string]any {
		return isolator("os/linux/capabilities-"+kind+"-set", map[string]any{"set": set})
	}
	cases := []struct {
		name string
		isos []map[string]any
		want string
	}{
		{"memory-too-small", []map[string]any{mem(map[string]any{"limit": "1k"})}, `app "a": isolator resource/memory: limit must be between 4Mi and 4Ei bytes, got 1k`},
		{"memory-negative", []map[string]any{mem(map[string]any{"limit": "-1Gi"})}, `isolator resource/memory: limit must be between 4Mi and 4Ei bytes, got -1Gi`},
		{"memory-garbage", []map[string]any{mem(map[string]any{"limit": "lots"})}, `isolator resource/memory: quantities must match`},
		{"memory-default", []map[string]any{mem(map[string]any{"default": true, "limit": "1Gi"})}, `isolator resource/memory: default must be false`},
		{"cpu-too-small", []map[string]any{isolator("resource/cpu", map[string]any{"limit": "1m"})}, `isolator resource/cpu: limit must be between 10m and 1048576 CPUs, got 1m`},
		{"cpu-too-large", []map[string]any{isolator("resource/cpu", map[string]any{"limit": "2Mi"})}, `isolator resource/cpu: limit must be between 10m and 1048576 CPUs, got 2Mi`},
		{"shares-low", []map[string]any{isolator("os/linux/cpu-shares", 1)}, `isolator os/linux/cpu-shares: must be between 2 and 262144, got 1`},
		{"shares-high", []map[string]any{isolator("os/linux/cpu-shares", 262145)}, `must be between 2 and 262144, got 262145`},
		{"shares-string", []map[string]any{isolator("os/linux/cpu-shares", "lots")}, `isolator os/linux/cpu-shares: want an integer between 2 and 262144`},
		{"oom-low", []map[string]any{isolator("os/linux/oom-score-adj", -1001)}, `isolator os/linux/oom-score-adj: must be between -1000 and 1000, got -1001`},
		{"oom-high", []map[string]any{isolator("os/linux/oom-score-adj", 1001)}, `must be between -1000 and 1000, got 1001`},
		{"nnp-string", []map[string]any{isolator("os/linux/no-new-privileges", "yes")}, `isolator os/linux/no-new-privileges: want true or false`},
		{"caps-empty", []map[string]any{caps("retain")}, `isolator os/linux/capabilities-retain-set: set must be non-empty`},
		{"caps-unknown", []map[string]any{caps("retain", "CAP_CHOWN", "CAP_FLY")}, `isolator os/linux/capabilities-retain-set: unknown capability "CAP_FLY"`},
		{"caps-lower-case", []map[string]any{caps("remove", "cap_chown")}, `isolator os/linux/capabilities-remove-set: unknown capability "cap_chown"`},
		{"caps-both", []map[string]any{caps("retain", "CAP_CHOWN"), caps("remove", "CAP_KILL")}, `isolators os/linux/capabilities-retain-set and os/linux/capabilities-remove-set: only one may be given`},
		{"seccomp-unknown-call", []map[string]any{seccompSet("remove", "", "read", "frobnicate")}, `isolator os/linux/seccomp-remove-set: unknown system call "frobnicate"`},
		{"seccomp-unknown-wildcard", []map[string]any{seccompSet("retain", "", "@rkt/everything")}, `isolator os/linux/seccomp-retain-set: unknown wildcard "@rkt/everything"`},
		{"seccomp-systemd-group", []map[string]any{seccompSet("retain", "", "@systemd/clock")}, `isolator os/linux/seccomp-retain-set: @systemd/clock: the systemd groups need a systemd stage1`},
		{"seccomp-unknown-errno", []map[string]any{seccompSet("remove", "EBOGUS", "read")}, `isolator os/linux/seccomp-remove-set: unknown errno "EBOGUS"`},
		{"seccomp-empty", []map[string]any{seccompSet("remove", "")}, `isolator os/linux/seccomp-remove-set: set must be non-empty`},
		{"seccomp-execve", []map[string]any{seccompSet("remove", "EPERM", "execve")}, `isolator os/linux/seccomp-remove-set: execve cannot be removed`},
		{"seccomp-both", []map[string]any{seccompSet("remove", "", "read"), seccompSet("retain", "", "read")}, `only one may be given`},
		{"duplicate", []map[string]any{isolator("os/linux/cpu-shares", 100), isolator("os/linux/cpu-shares", 200)}, `isolator os/linux/cpu-shares: given more than once`},
		{"no-value", []map[string]any{{"name": "os/linux/cpu-shares"}}, `isolator os/linux/cpu-shares: value missing`},
		{"unsupported", []map[string]any{isolator("resource/network-bandwidth", map[string]any{"default": true, "limit": "1G"})}, `isolator resource/network-bandwidth: not supported by this stage1`},
		{"unknown", []map[string]any{isolator("example.com/frobnicate", 1)}, `isolator example.com/frobnicate: unknown isolator`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := isoPod(t, []App{okApp("a")}, Isolators{"a": c.isos}, nil)
			r := runPod(t, p, RunOpts{})
			assertRefused(t, p, r, c.want)
		})
	}
}

// Isolators that come from the image (the pod manifest has no app section
// for it) are checked as strictly, and pod-level ones are refused: rkt
// never applied them, and ignoring them would run the apps unconfined.
func TestBadIsolatorsFromTheImageAndPodLevel(t *testing.T) {
	t.Run("image", func(t *testing.T) {
		var pm map[string]any
		must(t, json.Unmarshal(manifest([]App{okApp("a")}, nil), &pm))
		delete(pm["apps"].([]any)[0].(map[string]any), "app")
		b, _ := json.Marshal(pm)
		p := newPodRaw(t, b, []App{okApp("a")})
		im, _ := json.Marshal(map[string]any{
			"acKind": "ImageManifest", "acVersion": "0.8.11", "name": "pod1.dev/a",
			"app": map[string]any{"exec": []string{"/bin/probe"}, "user": "0", "group": "0",
				"isolators": []any{isolator("os/linux/cpu-shares", 1)}},
		})
		must(t, os.WriteFile(filepath.Join(p.Dir, layout.AppManifest("a")), im, 0o644))
		r := runPod(t, p, RunOpts{})
		assertRefused(t, p, r, `app "a": image manifest: isolator os/linux/cpu-shares: must be between 2 and 262144, got 1`)
	})
	t.Run("pod-level", func(t *testing.T) {
		var pm map[string]any
		must(t, json.Unmarshal(manifest([]App{okApp("a")}, nil), &pm))
		pm["isolators"] = []any{isolator("resource/memory", map[string]any{"limit": "1Gi"})}
		b, _ := json.Marshal(pm)
		p := newPodRaw(t, b, []App{okApp("a")})
		r := runPod(t, p, RunOpts{})
		assertRefused(t, p, r, "pod manifest: isolators: pod-level isolators are not supported")
	})
	t.Run("exec-proc-self-exe", func(t *testing.T) {
		p := newPod(t, []App{{Name: "a", Exec: []string{"/proc/self/exe"}}}, nil)
		r := runPod(t, p, RunOpts{})
		assertRefused(t, p, r, `app "a": exec: /proc/self/exe is under /proc`)
	})
}
