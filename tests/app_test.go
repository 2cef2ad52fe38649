package tests

import (
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

func TestAppEnvironment(t *testing.T) {
	p := newPod(t, []App{{Name: "web", Exec: probe("env"), Env: map[string]string{
		"FOO": "bar", "HOME": "/srv", "MULTI": "line1\nline2", "AC_APP_NAME": "spoofed",
	}}}, nil)
	r := runPod(t, p, RunOpts{Env: []string{"HOST_SECRET=1"}})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	got := strings.Join(r.Lines("env "), "\n")
	want := strings.Join([]string{
		`env "AC_APP_NAME=web"`, `env "FOO=bar"`, `env "HOME=/srv"`, `env "LOGNAME=root"`,
		`env "MULTI=line1\nline2"`,
		`env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"`,
		`env "SHELL=/bin/sh"`, `env "USER=root"`,
	}, "\n")
	if got != want {
		t.Fatalf("environment:\n%s\nwant:\n%s", got, want)
	}
}

func TestUserAndGroupResolvedInsideTheImage(t *testing.T) {
	hostDB := filepath.Join(t.TempDir(), "passwd")
	must(t, os.WriteFile(hostDB, []byte("hostonly:x:4321:4321::/:/bin/sh\n"), 0o644))
	cases := []struct {
		name, user, group string
		groups            []int
		rootfs            func(t *testing.T, root string)
		want              string // ids line, or the refusal
	}{
		{"names", "user", "staff", []int{10, 20}, nil, "ids uid=1000 gid=50 groups=[10 20]"},
		{"numeric-not-in-db", "200", "300", nil, nil, "ids uid=200 gid=300 groups=[]"},
		{"root", "root", "root", nil, nil, "ids uid=0 gid=0 groups=[]"},
		{"file-owner", "/bin/owned", "/bin/owned", nil, func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(root, "bin/owned"), nil, 0o644))
			must(t, os.Lchown(filepath.Join(root, "bin/owned"), 4242, 4343))
		}, "ids uid=4242 gid=4343 groups=[]"},
		{"passwd-symlink-to-host", "hostonly", "0", nil, func(t *testing.T, root string) {
			must(t, os.Remove(filepath.Join(root, "etc/passwd")))
			must(t, os.Symlink(hostDB, filepath.Join(root, "etc/passwd")))
		}, `app "a": user: "hostonly" user not found: the image has no /etc/passwd`},
		{"passwd-fifo", "user", "0", nil, func(t *testing.T, root string) {
			must(t, os.Remove(filepath.Join(root, "etc/passwd")))
			must(t, unix.Mkfifo(filepath.Join(root, "etc/passwd"), 0o644))
		}, `app "a": user: /etc/passwd in the image is not a regular file`},
		{"passwd-dev-zero", "user", "0", nil, func(t *testing.T, root string) {
			must(t, os.Remove(filepath.Join(root, "etc/passwd")))
			must(t, os.Symlink("/dev/zero", filepath.Join(root, "etc/passwd")))
		}, `app "a": user: `},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{{Name: "a", Exec: probe("ids"), User: c.user, Group: c.group, Groups: c.groups, Rootfs: c.rootfs}}, nil)
			t0 := time.Now()
			// A FIFO or /dev/zero read as a database would never end:
			// runPod's event deadline turns that hang into a failure,
			// so no bound on the time is needed to catch it.
			r := runPod(t, p, RunOpts{})
			if strings.HasPrefix(c.want, "ids ") {
				if r.Code != 0 || r.Line(t, "ids ") != c.want {
					t.Fatalf("exit %d, %q, want %q; stderr %s", r.Code, r.Stdout, c.want, r.Stderr)
				}
				return
			}
			assertRefused(t, p, r, c.want)
			t.Logf("refused in %v", time.Since(t0))
		})
	}
}

func TestWorkingDirectoryAndPathLookup(t *testing.T) {
	p := newPod(t, []App{
		{Name: "a", Exec: []string{"probe", "cwd"}, WD: "/tmp"},
		{Name: "b", Exec: []string{"probe", "cwd"}},
	}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	got := strings.Join(r.Lines("cwd "), ",")
	if got != "cwd /tmp,cwd /" && got != "cwd /,cwd /tmp" {
		t.Fatalf("cwd lines %q", got)
	}
}

// A missing executable is 127, one that cannot be executed 126, each with
// one line naming the app and the path (threats B7, B8); a missing file is
// named in rkt's stage1's words, be it the executable or the interpreter
// it needs (a script's, a dynamic binary's loader).
func TestExecFailures(t *testing.T) {
	dyn, err := os.ReadFile("/bin/true")
	must(t, err)
	ef, err := elf.Open("/bin/true")
	must(t, err)
	var loader string
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			must(t, err)
			loader = strings.TrimRight(string(b), "\x00")
		}
	}
	_ = ef.Close()
	if loader == "" {
		t.Fatal("the host's /bin/true is not a dynamic binary")
	}
	cases := []struct {
		name string
		exec []string
		code int
		msg  string
	}{
		{"missing", []string{"/bin/nope"}, 127, `stage1: app "a": Error: Unable to open "/bin/nope": No such file or directory`},
		{"missing-spaced", []string{"/bin/no pe", "x"}, 127, `stage1: app "a": Error: Unable to open "/bin/no pe": No such file or directory`},
		{"missing-loader", []string{"/bin/dyn"}, 127, `stage1: app "a": Error: Unable to open "` + loader + `": No such file or directory (the interpreter of "/bin/dyn")`},
		{"missing-script-interpreter", []string{"/bin/script"}, 127, `stage1: app "a": Error: Unable to open "/bin/no-shell": No such file or directory (the interpreter of "/bin/script")`},
		{"missing-script-interpreter-in-path", []string{"script"}, 127, `stage1: app "a": Error: Unable to open "/bin/no-shell": No such file or directory (the interpreter of "/bin/script")`},
		{"missing-in-path", []string{"nope"}, 127, `stage1: app "a": exec nope: not found in PATH`},
		{"not-executable", []string{"/etc/passwd"}, 126, `stage1: app "a": exec /etc/passwd: permission denied`},
		{"directory", []string{"/etc"}, 126, `stage1: app "a": exec /etc: permission denied`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{{Name: "a", Exec: c.exec, Rootfs: func(t *testing.T, root string) {
				must(t, os.WriteFile(filepath.Join(root, "bin/dyn"), dyn, 0o755))
				must(t, os.WriteFile(filepath.Join(root, "bin/script"), []byte("#!/bin/no-shell -e\n"), 0o755))
			}}}, nil)
			r := runPod(t, p, RunOpts{})
			if r.Code != c.code || p.Status(t, "a") != c.code {
				t.Fatalf("exit %d, status %d, want %d; stderr %q", r.Code, p.Status(t, "a"), c.code, r.Stderr)
			}
			lines := strings.Split(strings.TrimSpace(r.Stderr.String()), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], c.msg) {
				t.Fatalf("stderr %q, want one line starting %q", r.Stderr, c.msg)
			}
		})
	}
}

func TestVolumes(t *testing.T) {
	rw, ro := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(ro, "data"), []byte("from host"), 0o644))
	vols := []map[string]any{
		{"name": "rw", "kind": "host", "source": rw},
		{"name": "ro", "kind": "host", "source": ro, "readOnly": true},
		{"name": "shared", "kind": "empty", "mode": "0770", "uid": 1000, "gid": 50},
	}
	p := newPod(t, []App{
		// The writer fails last, once the reader is done: a failure
		// stops the pod.
		{Name: "writer", Exec: probe("write", "/rw/out", "hello", "+", "cat", "/ro/data", "+", "touch", "/shared/ready",
			"+", "wait-file", "/shared/done", "+", "write", "/ro/nope", "x"),
			MPoints: []map[string]any{{"name": "rw", "path": "/rw"}, {"name": "ro", "path": "/ro"}},
			Mounts:  []map[string]any{{"volume": "shared", "path": "/shared"}}},
		{Name: "reader", Exec: probe("wait-file", "/data/ready", "+", "stat", "/data", "+", "touch", "/data/done"),
			Mounts: []map[string]any{{"volume": "shared", "path": "/data"}}},
	}, vols)
	r := runPod(t, p, RunOpts{})
	if b, err := os.ReadFile(filepath.Join(rw, "out")); err != nil || string(b) != "hello" {
		t.Fatalf("rw volume: %q %v; stderr %s", b, err, r.Stderr)
	}
	if r.Line(t, "cat ") != "cat from host" {
		t.Fatalf("ro volume content: %q", r.Line(t, "cat "))
	}
	// The write to the read-only volume failed: the probe's exit 99.
	if p.Status(t, "writer") != 99 || !strings.Contains(r.Stderr.String(), "read-only file system") {
		t.Fatalf("write to a read-only volume: status %d, stderr %q", p.Status(t, "writer"), r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ro, "nope")); err == nil {
		t.Fatal("read-only volume was written")
	}
	if got := r.Line(t, "stat /data"); !strings.HasPrefix(got, "stat /data mode=40770") {
		t.Fatalf("empty volume: %q", got)
	}
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(p.Dir, "sharedVolumes/shared"), &st))
	if st.Uid != 1000 || st.Gid != 50 {
		t.Fatalf("empty volume owner %d:%d", st.Uid, st.Gid)
	}
}

// Each app is in its own root: the stage1's rootfs, its binaries and the
// other apps' roots cannot be reached by path.
func TestAppRootIsolation(t *testing.T) {
	p := newPod(t, []App{
		{Name: "a", Exec: probe("touch", "/tmp/mine-a", "+", "ls", "/", "+", "ls", "/tmp", "+", "stat", "/stage1-init", "+", "stat", "/run", "+", "ls", "/opt")},
		{Name: "b", Exec: probe("touch", "/tmp/mine-b")},
	}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if got := r.Line(t, "ls / "); got != "ls / bin dev etc proc sys tmp" {
		t.Errorf("root holds %q", got)
	}
	if got := r.Line(t, "ls /tmp"); got != "ls /tmp mine-a" {
		t.Errorf("another app's files are visible: %q", got)
	}
	for _, l := range []string{r.Line(t, "stat /stage1-init"), r.Line(t, "stat /run"), r.Line(t, "ls /opt")} {
		if !strings.Contains(l, "no such file or directory") {
			t.Errorf("stage1 rootfs reachable: %q", l)
		}
	}
}

func TestDevSysProcAndDNS(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe(
		"stat", "/dev/null", "+", "stat", "/dev/zero", "+", "stat", "/dev/full", "+", "stat", "/dev/random",
		"+", "stat", "/dev/urandom", "+", "stat", "/dev/tty", "+", "stat", "/dev/ptmx", "+", "mounts",
		"+", "cat", "/etc/hosts", "+", "cat", "/etc/resolv.conf", "+", "write", "/sys/kernel/x", "y")}}, nil)
	r := runPod(t, p, RunOpts{Args: []string{"--net=none", "--hostname=box", "--dns-conf-mode=resolv=host,hosts=default"}})
	for _, want := range []string{
		"stat /dev/null mode=20666 rdev=1:3", "stat /dev/zero mode=20666 rdev=1:5", "stat /dev/full mode=20666 rdev=1:7",
		"stat /dev/random mode=20666 rdev=1:8", "stat /dev/urandom mode=20666 rdev=1:9", "stat /dev/tty mode=20666 rdev=5:0",
		"stat /dev/ptmx mode=120777 rdev=0:0",
	} {
		if !strings.Contains(r.Stdout.String(), want+"\n") {
			t.Errorf("missing %q", want)
		}
	}
	mounts := r.Stdout.String()
	for _, want := range []string{
		"mounts /proc proc rw,", "mounts /sys sysfs ro,", "mounts /dev tmpfs rw,", "mounts /dev/pts devpts rw,",
		"mounts /dev/shm tmpfs rw,", "mounts /dev/mqueue mqueue rw,", "mounts /etc/hosts ", "mounts /etc/resolv.conf ",
	} {
		if !strings.Contains(mounts, want) {
			t.Errorf("missing mount %q", want)
		}
	}
	if !strings.Contains(r.Stdout.String(), "cat 127.0.0.1 localhost localhost.domain localhost4 localhost4.localdomain4 box\n") {
		t.Errorf("/etc/hosts lacks the hostname: %q", r.Lines("cat "))
	}
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	if first := strings.SplitN(string(hostResolv), "\n", 2)[0]; first != "" && !strings.Contains(r.Stdout.String(), "cat "+first) {
		t.Errorf("resolv=host: %q does not show the host's %q", r.Lines("cat "), first)
	}
	if p.Status(t, "a") != 99 || !strings.Contains(r.Stderr.String(), "read-only file system") {
		t.Errorf("/sys writable? status %d stderr %q", p.Status(t, "a"), r.Stderr)
	}
}

// The stop entry point (rkt stop): graceful by default, --force kills now.
// The stopped app's grace period is an hour, longer than any wait of the
// tests: a stop that waited for it (a graceful one that lost its SIGTERM,
// a forced one that sent SIGTERM instead of SIGKILL) never ends, and
// Run.Wait's event deadline fails the test, however slow the machine.
func TestStopEntryPoint(t *testing.T) {
	hour := map[string]string{"pod1/stop-grace-period": "1h"}
	for _, c := range []struct {
		name string
		args []string
		app  []string
		want int
	}{
		{"graceful", nil, probe("sleep", "1h"), 143},
		// It reports a SIGTERM and lives on: a forced stop must not
		// send one.
		{"force", []string{"--force"}, probe("report-term", "+", "sleep", "1h"), 137},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{{Name: "a", Exec: c.app, Annotations: hour}, {Name: "b", Exec: probe("sleep", "1h")}}, nil)
			r := start(t, p, RunOpts{})
			podPid(t, p)
			waitFor(t, 5*time.Second, "app running", func() bool {
				_, err := os.Lstat(filepath.Join(p.Dir, layout.SupervisorStatus))
				return err == nil && (c.name != "force" || strings.Contains(r.Stdout.String(), "report-term ready"))
			})
			cmd := exec.Command(filepath.Join(p.Dir, layout.Stage1RootFS, "stop"), append(c.args, p.UUID)...)
			cmd.Dir = p.Dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("stop: %v %s", err, out)
			}
			t0 := time.Now()
			r.Wait(t)
			t.Logf("the pod stopped in %v", time.Since(t0))
			if got := p.Status(t, "a"); got != c.want {
				t.Fatalf("status %d, want %d", got, c.want)
			}
			if c.name == "force" && strings.Contains(r.Stdout.String(), "term received") {
				t.Fatalf("a forced stop sent SIGTERM: %q", r.Stdout)
			}
		})
	}
}

func TestGCEntryPointIsIdempotent(t *testing.T) {
	p := newPod(t, []App{okApp("a")}, nil)
	runPod(t, p, RunOpts{})
	for i := 0; i < 2; i++ {
		cmd := exec.Command(filepath.Join(p.Dir, layout.Stage1RootFS, "gc"), "--debug", "--local-config", "/etc/rkt", p.UUID)
		cmd.Dir = p.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gc: %v %s", err, out)
		}
	}
}
