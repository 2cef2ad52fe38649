package tests

// Behaviours rkt's own functional suite expects of a stage1 (issue 13),
// each checked through the real rkt.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// rkt run --memory/--cpu append their isolators after the image's own:
// the last one wins, and no-new-privileges given twice is on if either
// says so (as with rkt's stage1).
func TestRktIsolatorsGivenTwice(t *testing.T) {
	r := newRkt(t)
	img := r.aci("limited", map[string]any{
		"exec": []string{"/bin/probe", "sleep", "1h"},
		"isolators": []map[string]any{
			{"name": "resource/memory", "value": map[string]any{"limit": "100M"}},
			{"name": "resource/cpu", "value": map[string]any{"limit": "2"}},
			{"name": "os/linux/no-new-privileges", "value": true},
			{"name": "os/linux/no-new-privileges", "value": false},
		},
	}, nil)
	p := r.start("run", img, "--memory=64Mi", "--cpu=250m")
	pid := r.appPid(p.UUID, "limited")
	mem := cgroupFile(t, pid, "memory", "memory.limit_in_bytes")
	cpu := cgroupFile(t, pid, "cpu", "cpu.cfs_quota_us")
	if !strings.Contains(mem, "/sys/fs/cgroup/memory") {
		mem, cpu = cgroupFile(t, pid, "memory", "memory.max"), cgroupFile(t, pid, "cpu", "cpu.max")
	}
	if got := readTrim(t, mem); got != strconv.Itoa(64<<20) {
		t.Errorf("%s = %s, want the --memory limit %d", mem, got, 64<<20)
	}
	if got := readTrim(t, cpu); !strings.HasPrefix(got, "25000") {
		t.Errorf("%s = %s, want the --cpu quota 25000", cpu, got)
	}
	st := readTrim(t, "/proc/"+strconv.Itoa(pid)+"/status")
	if !hasLine(st, `^NoNewPrivs:\s+1$`) {
		t.Errorf("no-new-privileges true then false: want on\n%s", st)
	}
	r.rkt("stop", p.UUID)
	p.wait(t)
}

// rkt enter gives the command the caller's TERM (vt100 without one), not
// the app's: it runs on the caller's terminal.
func TestRktEnterKeepsCallersTerm(t *testing.T) {
	r := newRkt(t)
	img := r.aci("termapp", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	p := r.start("run", "--set-env=TERM=app-term", img)
	base := r.env
	defer func() { r.env = base }()
	var env []string
	for _, kv := range base {
		if !strings.HasPrefix(kv, "TERM=") {
			env = append(env, kv)
		}
	}
	r.env = append(env, "TERM=caller-term")
	if out := r.rkt("enter", p.UUID, "/bin/probe", "env"); !hasLine(out, `^env "TERM=caller-term"$`) || strings.Contains(out, "app-term") {
		t.Errorf("enter with TERM=caller-term: %s", out)
	}
	r.env = env
	if out := r.rkt("enter", p.UUID, "/bin/probe", "env"); !hasLine(out, `^env "TERM=vt100"$`) {
		t.Errorf("enter without TERM: %s", out)
	}
	r.env = base
	r.rkt("stop", p.UUID)
	p.wait(t)
}

// The pod's subcgroup file holds the bare cgroup path, as rkt's stage1
// writes it, and names a cgroup that exists.
func TestRktSubcgroupFile(t *testing.T) {
	r := newRkt(t)
	img := r.aci("cg", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	p := r.start("run", img)
	b, err := os.ReadFile(filepath.Join(r.data, "pods/run", p.UUID, "subcgroup"))
	must(t, err)
	s := string(b)
	if s == "" || strings.ContainsAny(s, "\n\x00") || strings.HasPrefix(s, "/") {
		t.Fatalf("subcgroup %q: want a relative path without a newline", s)
	}
	m1, _ := filepath.Glob("/sys/fs/cgroup/*/" + escapeGlob(s))
	if _, err := os.Stat("/sys/fs/cgroup/" + s); err != nil && len(m1) == 0 {
		t.Errorf("subcgroup %q names no cgroup", s)
	}
	r.rkt("stop", p.UUID)
	p.wait(t)
}

// --user/--group given as a file with --private-users: the app runs as
// the file's owner in the image, although stage0 shifted the owners of
// the image's tree into the pod's range on the host.
func TestRktUserFromFileWithPrivateUsers(t *testing.T) {
	r := newRkt(t)
	img := r.aci("owned", map[string]any{"exec": []string{"/bin/probe", "ids"}},
		map[string]aciFile{"owned": {Mode: 0o644, Body: "x", UID: 1234, GID: 567}})
	out, errOut, code := r.run("--private-users", "--no-overlay", img, "--user=/owned", "--group=/owned")
	if code != 0 || !hasLine(out, `^ids uid=1234 gid=567 `) {
		t.Fatalf("--user=/owned --group=/owned --private-users: exit %d, want uid 1234 gid 567\n%s%s", code, out, errOut)
	}
}

// --mds-token: with the host's network the apps reach rkt's metadata
// service at 127.0.0.1, as with rkt's stage1 (stage0 registered the pod).
// rkt itself is not used here: its registration needs a metadata service
// on the host's fixed socket, which other tests may be using.
func TestMetadataURLWithHostNetwork(t *testing.T) {
	p := newPod(t, []App{{Name: "web", Exec: probe("env")}}, nil)
	r := runPod(t, p, RunOpts{Args: []string{"--net=host", "--mds-token=0123abcd"}})
	if r.Code != 0 || !strings.Contains(r.Stdout.String(), `env "AC_METADATA_URL=http://127.0.0.1:18112/0123abcd"`) {
		t.Fatalf("exit %d, AC_METADATA_URL missing:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	p = newPod(t, []App{{Name: "web", Exec: probe("env")}}, nil)
	r = runPod(t, p, RunOpts{Args: []string{"--net=host", "--mds-token=x\ny"}})
	if r.Code != 254 || !strings.Contains(r.Stderr.String(), "--mds-token") {
		t.Fatalf("a token with a newline: exit %d: %s", r.Code, r.Stderr)
	}
}

// A user or group missing from the image fails the pod with rkt's words.
func TestRktUnknownUserMessage(t *testing.T) {
	r := newRkt(t)
	img := r.aci("nouser", nil, nil)
	if out, errOut, code := r.run(img, "--user=user2"); code == 0 || !strings.Contains(errOut, `"user2" user not found`) {
		t.Fatalf("--user=user2: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := r.run(img, "--group=group2"); code == 0 || !strings.Contains(errOut, `"group2" group not found`) {
		t.Fatalf("--group=group2: exit %d\n%s%s", code, out, errOut)
	}
}
