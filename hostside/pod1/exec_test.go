package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/pod1/pod1/hostside/launch"
)

// The test binary plays two extra roles, chosen by environment: "pod1"
// (the CLI, started as a subprocess because `pod1 run` execs) and, when
// exec'd through a stage1 rootfs as ".../run", a stub stage1 that reports
// what it was given and exits 7.
const (
	roleEnv   = "POD1_TEST_ROLE"
	reportEnv = "POD1_TEST_REPORT"
	stubExit  = 7
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		if filepath.Base(os.Args[0]) == "run" {
			os.Exit(stubStage1())
		}
		os.Exit(pod1Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// stubReport is what the stub stage1 saw.
type stubReport struct {
	Argv       []string
	Cwd        string
	RktEnv     []string // every RKT_* entry, in order
	CloExec    bool     // FD_CLOEXEC on the lock fd
	LockIsCwd  bool     // the lock fd is the pod dir
	FdFlags    string   // "flags:" line of /proc/self/fdinfo/<fd>
	FlockErrno string   // result of a second flock on the pod dir
}

func stubStage1() int {
	var r stubReport
	r.Argv = os.Args
	r.Cwd, _ = os.Getwd()
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RKT_") {
			r.RktEnv = append(r.RktEnv, kv)
		}
	}
	if fd, err := strconv.Atoi(os.Getenv("RKT_LOCK_FD")); err == nil {
		flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		r.CloExec = flags&unix.FD_CLOEXEC != 0
		var a, b unix.Stat_t
		r.LockIsCwd = unix.Fstat(fd, &a) == nil && unix.Stat(".", &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev
		info, _ := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
		for _, l := range strings.Split(string(info), "\n") {
			if strings.HasPrefix(l, "flags:") {
				r.FdFlags = strings.TrimSpace(strings.TrimPrefix(l, "flags:"))
			}
		}
		if other, err := unix.Open(".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			ferr := unix.Flock(other, unix.LOCK_SH|unix.LOCK_NB)
			r.FlockErrno = fmt.Sprint(ferr)
			unix.Close(other)
		}
	}
	data, _ := json.Marshal(r)
	if err := os.WriteFile(os.Getenv(reportEnv), data, 0o600); err != nil {
		return 99
	}
	return stubExit
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts overlays")
	}
}

// writeTree creates files under root; a value starting with "->" makes a
// symlink, a value ending in "/" a directory.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, v := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasPrefix(v, "->"):
			err = os.Symlink(strings.TrimPrefix(v, "->"), p)
		case strings.HasSuffix(v, "/"):
			err = os.MkdirAll(p, 0o755)
		default:
			err = os.WriteFile(p, []byte(v), 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// appACI writes an uncompressed ACI file with one app.
func appACI(t *testing.T, path string) string {
	t.Helper()
	manifest := `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/hello",
	 "labels":[{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
	 "app":{"exec":["/hello"],"user":"0","group":"0"}}`
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "manifest", Mode: 0o644, Size: int64(len(manifest)), Typeflag: tar.TypeReg},
		{Name: "rootfs/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "rootfs/hello", Mode: 0o755, Size: 2, Typeflag: tar.TypeReg},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "manifest":
			_, _ = tw.Write([]byte(manifest))
		case "rootfs/hello":
			_, _ = tw.Write([]byte("hi"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// stage1Dir writes a stage1 ACI directory whose run entrypoint is
// run -> stage1-init, a copy of init (an absolute host path) or init's
// content: an entry point is resolved inside the stage1 rootfs, so a
// symlink to the host's file would be refused.
func stage1Dir(t *testing.T, dir, init string) string {
	t.Helper()
	manifest := `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/stage1",
	 "annotations":[{"name":"coreos.com/rkt/stage1/run","value":"/run"},
	                {"name":"coreos.com/rkt/stage1/interface-version","value":"5"}]}`
	writeTree(t, dir, map[string]string{"manifest": manifest})
	files := map[string]string{"run": "->stage1-init", "rkt/status": "/", "rkt/env": "/"}
	if strings.HasPrefix(init, "/") {
		b, err := os.ReadFile(init)
		if err != nil {
			t.Fatal(err)
		}
		files["stage1-init"] = string(b)
	} else {
		files["stage1-init"] = init // file content
	}
	writeTree(t, filepath.Join(dir, "rootfs"), files)
	if err := os.Chmod(filepath.Join(dir, "manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runPod1 runs the CLI as a subprocess, bounded by a timeout.
func runPod1(t *testing.T, report string, args ...string) (int, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	// A stale RKT_LOCK_FD in the caller's environment must be replaced.
	cmd.Env = append(os.Environ(), roleEnv+"=1", reportEnv+"="+report, "RKT_LOCK_FD=99")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run pod1: %v\n%s", err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestRunExecsStage1(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	t.Cleanup(func() {
		if err := launch.UnmountAll(base); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s1 := stage1Dir(t, filepath.Join(base, "stage1"), exe)
	app := appACI(t, filepath.Join(base, "hello.aci"))
	data := filepath.Join(base, "data")
	report := filepath.Join(base, "report.json")
	uuidFile := filepath.Join(base, "uuid")

	code, out := runPod1(t, report, "--dir="+data, "run", "--stage1-path="+s1, "--uuid-file-save="+uuidFile,
		"--hostname=h", "--net=none", "--volume", "v,kind=empty", app, "--mount", "volume=v,target=/v", "--", "a1")
	if code != stubExit {
		t.Fatalf("pod1 run exited %d, want the stage1's %d; output:\n%s", code, stubExit, out)
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r stubReport
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	uuidRaw, _ := os.ReadFile(uuidFile)
	uuid := string(uuidRaw)
	pod := filepath.Join(data, "pods", "run", uuid)
	want := []string{filepath.Join(pod, "stage1", "rootfs", "run"), "--net=none", "--local-config=/etc/rkt", "--hostname=h", uuid}
	if strings.Join(r.Argv, " ") != strings.Join(want, " ") {
		t.Errorf("argv\n got %q\nwant %q", r.Argv, want)
	}
	if r.Cwd != pod {
		t.Errorf("cwd %q, want %q", r.Cwd, pod)
	}
	if len(r.RktEnv) != 3 || !strings.HasPrefix(r.RktEnv[0], "RKT_LOCK_FD=") || r.RktEnv[0] == "RKT_LOCK_FD=99" ||
		r.RktEnv[1] != "RKT_SELINUX_CONTEXT=" || r.RktEnv[2] != "RKT_SELINUX_MOUNT_CONTEXT=" {
		t.Errorf("RKT_* env %q", r.RktEnv)
	}
	if r.CloExec || !r.LockIsCwd {
		t.Errorf("lock fd: cloexec=%v is-pod-dir=%v; want inherited pod dir fd", r.CloExec, r.LockIsCwd)
	}
	if fl, err := strconv.ParseUint(r.FdFlags, 8, 64); err != nil || fl&unix.O_DIRECTORY == 0 || fl&unix.O_ACCMODE != unix.O_RDONLY {
		t.Errorf("lock fd flags %q: want O_RDONLY|O_DIRECTORY", r.FdFlags)
	}
	if r.FlockErrno != unix.EWOULDBLOCK.Error() {
		t.Errorf("second flock while the stage1 ran: %q, want %q", r.FlockErrno, unix.EWOULDBLOCK.Error())
	}
	// As with rkt, the overlays stay mounted after the pod (gc removes
	// them), and the pod stays in run/, now unlocked ("exited").
	if mounts, _ := launch.MountsUnder(pod); len(mounts) != 2 {
		t.Errorf("mounts after the pod: %v, want stage1 + app", mounts)
	}
}

func TestRunExecFailureUndoes(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	t.Cleanup(func() {
		if err := launch.UnmountAll(base); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// Executable but not a valid program: exec fails with ENOEXEC after
	// the pod is fully prepared.
	s1 := stage1Dir(t, filepath.Join(base, "stage1"), "not a program\n")
	app := appACI(t, filepath.Join(base, "hello.aci"))
	data := filepath.Join(base, "data")
	code, out := runPod1(t, filepath.Join(base, "report"), "run", "--dir="+data, "--stage1-path="+s1,
		"--uuid-file-save="+filepath.Join(base, "uuid"), app)
	if code != 254 {
		t.Fatalf("exit %d, want 254; output:\n%s", code, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "pod1 run: ") ||
		!strings.Contains(lines[0], "exec format error") {
		t.Errorf("output %q, want one `pod1 run: ...` line naming the exec error", out)
	}
	if mounts, _ := launch.MountsUnder(base); len(mounts) != 0 {
		t.Errorf("mounts left: %v", mounts)
	}
	for _, s := range []string{"embryo", "prepare", "run"} {
		if ents, _ := os.ReadDir(filepath.Join(data, "pods", s)); len(ents) != 0 {
			t.Errorf("pods/%s holds %v after a failed run", s, ents)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "uuid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uuid file left for a pod that never ran")
	}
}
