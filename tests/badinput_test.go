package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// assertRefused checks the rule for bad input: exit 254 before anything
// starts, one stderr line naming the field, nothing changed on the host.
func assertRefused(t *testing.T, p *Pod, r *Run, want string) {
	t.Helper()
	if r.Code != 254 {
		t.Fatalf("exit %d, want 254; stderr %q", r.Code, r.Stderr)
	}
	msg := strings.TrimSuffix(r.Stderr.String(), "\n")
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "stage1: ") {
		t.Errorf("want one stderr line, got %q", r.Stderr)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("message %q does not name %q", msg, want)
	}
	if r.Stdout.Len() != 0 {
		t.Errorf("an app ran: %q", r.Stdout)
	}
	for _, f := range []string{layout.Pid, layout.SupervisorStatus, layout.HostsFile, layout.Pod1Dir, layout.SharedVolumes} {
		if _, err := os.Lstat(filepath.Join(p.Dir, f)); err == nil {
			t.Errorf("%s was created", f)
		}
	}
	ents, _ := os.ReadDir(p.statusDir())
	if len(ents) != 0 {
		t.Errorf("status files written: %v", ents)
	}
}

func okApp(name string) App { return App{Name: name, Exec: probe("exit", "0")} }

func TestBadManifestsAreRefused(t *testing.T) {
	big := make([]byte, 17<<20)
	for i := range big {
		big[i] = ' '
	}
	copy(big, `{"acKind":"PodManifest","acVersion":"1.30.0","apps":[]}`)
	cases := []struct {
		name     string
		manifest []byte
		apps     []App
		want     string
	}{
		{"not-json", []byte(`{"acKind": "PodManifest", apps`), nil, "pod manifest: invalid JSON at byte"},
		{"truncated", manifest([]App{okApp("a")}, nil)[:40], nil, "pod manifest: invalid JSON"},
		{"wrong-kind", []byte(`{"acKind":"ImageManifest","acVersion":"1.30.0","apps":[]}`), nil, "pod manifest"},
		{"too-large", big, nil, "exceeds 16777216 bytes"},
		{"zero-apps", manifest(nil, nil), nil, "pod must contain at least one application"},
		{"duplicate", manifest([]App{okApp("a"), okApp("a")}, nil), []App{okApp("a")}, `apps[1].name: duplicate app name "a"`},
		{"marker-collision", manifest([]App{okApp("web"), okApp("web-created")}, nil), []App{okApp("web"), okApp("web-created")}, `"web-created" collides with status marker of app "web"`},
		{"env-nul", manifest([]App{{Name: "a", Exec: probe("exit", "0"), Env: map[string]string{"K": "a\x00b"}}}, nil), []App{okApp("a")}, `app "a": environment: variable "K" contains a NUL byte`},
		{"relative-wd", manifest([]App{{Name: "a", Exec: probe("exit", "0"), WD: "tmp"}}, nil), []App{okApp("a")}, "workingDirectory must be an absolute path"},
		{"wd-proc-fd", manifest([]App{{Name: "a", Exec: probe("exit", "0"), WD: "/proc/self/fd/3"}}, nil), []App{okApp("a")}, `app "a": workingDirectory: "/proc/self/fd/3" is inside /proc`},
		{"missing-wd", manifest([]App{{Name: "a", Exec: probe("exit", "0"), WD: "/nope"}}, nil), []App{okApp("a")}, `app "a": workingDirectory: /nope`},
		{"unknown-user", manifest([]App{{Name: "a", Exec: probe("exit", "0"), User: "nobody"}}, nil), []App{okApp("a")}, `app "a": user: "nobody" user not found in the image's /etc/passwd`},
		{"volume-on-proc", manifest([]App{{Name: "a", Exec: probe("exit", "0"), MPoints: []map[string]any{{"name": "v", "path": "/proc/sys"}}}}, []map[string]any{{"name": "v", "kind": "empty"}}), []App{okApp("a")}, `target "/proc/sys" is on /proc`},
		{"unknown-handler", manifest([]App{{Name: "a", Exec: probe("exit", "0"), Handlers: []map[string]any{{"name": "pre-stop", "exec": []string{"/bin/probe"}}}}}, nil), []App{okApp("a")}, `bad eventHandler "name": "pre-stop"`},
		{"handler-twice", manifest([]App{{Name: "a", Exec: probe("exit", "0"), Handlers: []map[string]any{{"name": "pre-start", "exec": []string{"/bin/probe"}}, {"name": "pre-start", "exec": []string{"/bin/probe"}}}}}, nil), []App{okApp("a")}, `Only one eventHandler of name "pre-start" allowed`},
		{"undefined-volume", manifest([]App{{Name: "a", Exec: probe("exit", "0"), Mounts: []map[string]any{{"volume": "nope", "path": "/x"}}}}, nil), []App{okApp("a")}, `volume "nope" is not defined`},
	}
	for _, bad := range []string{"../x", "a/b", ".", "..", "A", "a_b", ""} {
		cases = append(cases, struct {
			name     string
			manifest []byte
			apps     []App
			want     string
		}{"name-" + bad, manifest([]App{okApp(bad)}, nil), nil, "apps[0].name: invalid app name"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPodRaw(t, c.manifest, c.apps)
			r := runPod(t, p, RunOpts{})
			assertRefused(t, p, r, c.want)
		})
	}
}

// An app root whose /proc, /sys or /dev is not a directory is refused
// before anything is mounted (CVE-2019-19921, CVE-2023-27561).
func TestHostileRootfsPseudoDirsAreRefused(t *testing.T) {
	for _, d := range []string{"proc", "sys", "dev"} {
		for _, kind := range []string{"symlink", "file"} {
			t.Run(d+"-"+kind, func(t *testing.T) {
				target := t.TempDir()
				app := App{Name: "a", Exec: probe("exit", "0"), Rootfs: func(t *testing.T, root string) {
					if kind == "symlink" {
						must(t, os.Symlink(target, filepath.Join(root, d)))
					} else {
						must(t, os.WriteFile(filepath.Join(root, d), nil, 0o644))
					}
				}}
				p := newPod(t, []App{app}, nil)
				r := runPod(t, p, RunOpts{})
				assertRefused(t, p, r, `app "a": rootfs: /`+d+` is a `)
				if ents, _ := os.ReadDir(target); len(ents) != 0 {
					t.Errorf("something was created in the symlink's target: %v", ents)
				}
			})
		}
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown-flag", []string{"--bogus"}, "flags: flag provided but not defined: -bogus"},
		{"bad-ipc", []string{"--ipc=weird"}, `--ipc="weird"`},
		{"bad-dns", []string{"--dns-conf-mode=resolv=foo"}, "--dns-conf-mode"},
		{"host-and-more", []string{"--net=host,default"}, "--net="},
		{"none-and-more", []string{"--net=none,default"}, `--net="none,default": none cannot be combined`},
		{"none-and-invalid", []string{"--net=default-restricted,none,bad/name"}, `--net: "bad/name" is not a valid network name`},
		{"invalid-beside-valid", []string{"--net=default,bad/name"}, `--net: "bad/name" is not a valid network name`},
		{"none-args", []string{"--net=none:IP=10.1.1.1"}, `--net: arguments are not supported by the special network "none"`},
		{"hostname-newline", []string{"--net=none", "--hostname=box\n10.0.0.1"}, `--hostname="box\n10.0.0.1"`},
		{"hostname-long", []string{"--net=none", "--hostname=" + strings.Repeat("a", 60) + ".bcde"}, "--hostname="},
		{"hostname-label", []string{"--net=none", "--hostname=-box"}, "--hostname="},
		{"hostname-space", []string{"--net=none", "--hostname=a b"}, "--hostname="},
		{"private-users-form", []string{"--private-users=100000"}, `--private-users="100000": want BASE:COUNT`},
		{"private-users-number", []string{"--private-users=1e5:65536"}, `--private-users="1e5:65536": want BASE:COUNT, two decimal numbers`},
		{"private-users-host-root", []string{"--private-users=0:65536"}, "BASE 0 would make the apps' root the host's root"},
		{"private-users-empty", []string{"--private-users=100000:0"}, "COUNT must be at least 1"},
		{"private-users-overflow", []string{"--private-users=4294967290:65536"}, "past the last uid 4294967294"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{okApp("a")}, nil)
			r := runPod(t, p, RunOpts{Args: c.args})
			assertRefused(t, p, r, c.want)
		})
	}
	// An app whose user the mapping does not cover would run as the
	// overflow uid, or not at all.
	t.Run("private-users-app-uid", func(t *testing.T) {
		a := okApp("a")
		a.User = "1000"
		p := newPod(t, []App{a}, nil)
		r := runPod(t, p, RunOpts{Args: []string{"--net=none", "--private-users=100000:1000"}})
		assertRefused(t, p, r, `app "a": user: uid 1000 is outside the pod's user namespace (0-999, --private-users)`)
	})
	t.Run("malformed-uuid", func(t *testing.T) {
		p := newPod(t, []App{okApp("a")}, nil)
		p.UUID = "not-a-uuid"
		r := runPod(t, p, RunOpts{})
		assertRefused(t, p, r, `UUID "not-a-uuid" is malformed`)
	})
	t.Run("no-uuid", func(t *testing.T) {
		p := newPod(t, []App{okApp("a")}, nil)
		p.UUID = "--net=none"
		r := runPod(t, p, RunOpts{})
		assertRefused(t, p, r, "UUID: want exactly one argument")
	})
}

// RKT_LOCK_FD must be an open directory fd on the pod directory holding
// the exclusive lock: running without it would let gc delete a live pod.
func TestBadLockFdsAreRefused(t *testing.T) {
	file, err := os.CreateTemp(t.TempDir(), "notdir")
	must(t, err)
	defer file.Close()
	other, err := os.Open(t.TempDir())
	must(t, err)
	defer other.Close()
	p0 := newPod(t, []App{okApp("a")}, nil)
	cases := []struct {
		name string
		o    RunOpts
		want string
	}{
		{"missing", RunOpts{NoLock: true}, "RKT_LOCK_FD: not set"},
		{"not-a-number", RunOpts{LockFdEnv: "abc"}, `RKT_LOCK_FD="abc": not a file descriptor number`},
		{"closed", RunOpts{LockFdEnv: "77"}, "RKT_LOCK_FD: fd 77 is not open"},
		{"not-a-directory", RunOpts{LockFile: file}, "RKT_LOCK_FD: fd 3 is not a directory"},
		{"other-directory", RunOpts{LockFile: other}, "RKT_LOCK_FD: fd 3 is not the pod directory"},
		{"not-locked", RunOpts{NoFlock: true}, "RKT_LOCK_FD: fd 3 is not locked"},
		// The locked pod directory as stdin: the apps would inherit it.
		{"stdin", RunOpts{LockFdEnv: "0", Stdin: lockedDir(t, p0)}, "RKT_LOCK_FD=0: fds 0-2 are stdin, stdout and stderr, not a lock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{okApp("a")}, nil)
			if c.o.Stdin != nil {
				p = p0
				c.o.LockFile = c.o.Stdin.(*os.File)
			}
			r := runPod(t, p, c.o)
			assertRefused(t, p, r, c.want)
		})
	}
}

// lockedDir opens the pod directory and takes its exclusive lock, as
// stage0 does.
func lockedDir(t *testing.T, p *Pod) *os.File {
	t.Helper()
	f, err := os.Open(p.Dir)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	return f
}

// The Go run is the pod's set-up, which the waiter starts; the waiter is
// what holds the lock and passes stop requests on for the pod's whole
// life. Run as the entry point itself (an image whose run links to
// stage1-init), nothing would, once it handed over: it refuses, naming
// what it missed, before it starts anything.
func TestGoRunRefusesToStartWithoutTheWaiter(t *testing.T) {
	p := newPod(t, []App{okApp("a")}, nil)
	run := filepath.Join(p.Dir, layout.Stage1RootFS, "run")
	must(t, os.Remove(run))
	must(t, os.Symlink(bin("stage1-init"), run))
	r := runPod(t, p, RunOpts{})
	assertRefused(t, p, r, "POD1_WAITER_FD: not set: run must be started as the image's run, the waiter (pod1-waiter)")
	if len(cgroupDirs(p)) > 0 {
		t.Errorf("cgroups made: %v", cgroupDirs(p))
	}
}
