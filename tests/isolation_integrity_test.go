package tests

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moby/sys/capability"
)

func allCapabilities() []string {
	var out []string
	for _, c := range capability.ListKnown() {
		out = append(out, "CAP_"+strings.ToUpper(c.String()))
	}
	return out
}

// T-EXE-2, T-ROOT-1, T-PTRACE-1 (CVE-2019-5736, CVE-2016-9962): rkt gc
// runs the pod's stage1 binaries as host root later, so nothing in the
// pod may change them. The app's pid 1 is pod1-pause, the one stage1
// process in the apps' pid namespace: a root app with the default
// capabilities cannot see its binary, root, fds or environment at all; a
// root app with every capability can see them (the negative control for
// its non-dumpability) but still cannot open the binary for writing,
// under any of its names, nor ptrace it; no app holds a host fd; and
// every stage1 file hashes the same afterwards.
func TestStage1UnreachableFromRootApps(t *testing.T) {
	apps := []App{
		{Name: "plain", Exec: probe("readlink", "/proc/1/exe", "+", "open-write", "/proc/1/exe", "+", "ls", "/proc/1/root",
			"+", "open-read", "/proc/1/environ", "+", "open-read", "/proc/1/fd/0", "+", "ptrace-attach", "1")},
	}
	// fds first: the probe's Go runtime opens an epoll fd once it waits.
	apps = append(apps, App{Name: "allcaps", Exec: probe("fds", "+", "readlink", "/proc/1/exe", "+", "open-write", "/proc/1/exe",
		"+", "open-write", "/proc/1/root"+bin("stage1-init"), "+", "ptrace-attach", "1")})
	p := isoPod(t, apps, Isolators{"allcaps": {isolator("os/linux/capabilities-retain-set", map[string]any{"set": allCapabilities()})}}, nil)
	before := stage1Hashes(t, p)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	out := r.Stdout.String()
	defer func() {
		if t.Failed() {
			t.Logf("stdout:\n%s", out)
		}
	}()
	for _, w := range []string{
		// plain: the app's pid 1, pod1-pause, is non-dumpable and the
		// app lacks CAP_SYS_PTRACE (and pod1-pause holds no fd).
		"readlink /proc/1/exe EACCES", "open-write /proc/1/exe EACCES", "ls /proc/1/root error open /proc/1/root: permission denied",
		"open-read /proc/1/environ EACCES", "open-read /proc/1/fd/0 ENOENT", "ptrace-attach 1 EPERM",
		// allcaps: it sees pod1-pause's binary, a detached read-only
		// mount of that file alone (named "/"), which the kernel will
		// not let anyone write while it runs; its root is empty
		// (TestPID1HasARootOfItsOwn); the default seccomp filter
		// refuses ptrace. PID 1 is out of its reach altogether
		// (TestStage1OutOfTheAppsReach).
		"readlink /proc/1/exe -> /",
		"open-write /proc/1/exe ETXTBSY", "open-write /proc/1/root" + bin("stage1-init") + " ENOENT", "fds 0 1 2",
	} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("missing %q", w)
		}
	}
	if strings.Count(out, "ptrace-attach 1 EPERM\n") != 2 {
		t.Errorf("ptrace of PID 1: %q", r.Lines("ptrace-attach"))
	}
	if !strings.Contains(r.Stderr.String(), `warning: app "allcaps" has CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN`) {
		t.Errorf("no warning for the escape capabilities: %q", r.Stderr)
	}
	if after := stage1Hashes(t, p); !reflect.DeepEqual(before, after) {
		t.Fatalf("stage1 files changed:\nbefore %v\nafter  %v", before, after)
	}
}

// T-EXE-1 (CVE-2019-5736): an image whose entrypoint is a script run by
// "#!/proc/self/exe" would get the stage1's binary executed as the app;
// it is refused (126), over and over (it restarts), while another root app
// of the pod tries all the while to open every stage1 binary it sees for
// writing, directly and by reopening O_PATH handles, and to see where the
// stage1's processes that set each run up stand (T-PTRACE-2). Nothing is
// writable, and a process still in the host's root is never visible.
func TestProcSelfExeScriptCannotRewriteStage1(t *testing.T) {
	apps := []App{
		{Name: "attacker", Exec: probe("pwn-exe", "1500ms")},
		{Name: "evil", Exec: []string{"/bin/evil"}, Rootfs: func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(root, "bin/evil"), []byte("#!/proc/self/exe\n"), 0o755))
		}, Annotations: map[string]string{"pod1/restart-policy": "always", "pod1/restart-backoff": "5ms",
			"pod1/restart-backoff-max": "5ms", "pod1/start-limit-burst": "100000", "pod1/start-limit-interval": "1s"}},
	}
	p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/exit-policy": "main-app", "pod1/main-app": "attacker"}), apps)
	before := stage1Hashes(t, p)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	got := r.Line(t, "pwn-exe ")
	if strings.Contains(got, " ok=") || strings.Contains(got, "reopen-ok=") || strings.Contains(got, "cwd-outside=") {
		t.Fatalf("attacker: %q", got)
	}
	// The script is refused before the stage1 binary could run as the app.
	// The set-up process has no pid in the app's /proc: the link leads
	// it nowhere, where the app's process would have found itself.
	if !strings.Contains(r.Stderr.String(), `app "evil": exec /bin/evil: /proc/self/exe resolves into /proc: permission denied`) {
		t.Errorf("the #!/proc/self/exe script was not refused: %s", r.Stderr)
	}
	t.Logf("attacker: %s", got)
	if after := stage1Hashes(t, p); !reflect.DeepEqual(before, after) {
		t.Fatalf("stage1 files changed:\nbefore %v\nafter  %v", before, after)
	}
}
