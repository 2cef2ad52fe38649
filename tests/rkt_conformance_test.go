package tests

// What rkt's own functional tests check and pod1 follows, through the real
// rkt: issue 35's decisions (docs/conformance.md).

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pod1/pod1/status"
)

// An app the pod stopped because another app failed records 0 in the
// status file rkt reads, as rkt's stage1 records it (rkt's
// TestExitCodeWithSeveralApps); pod1's JSON record keeps how it ended (the
// pod's SIGTERM) and that the pod stopped it. The pod's code is the
// failed app's.
func TestRktSiblingStoppedAfterAFailureRecordsZero(t *testing.T) {
	r := newRkt(t)
	ok := r.aci("ok", map[string]any{"exec": []string{"/bin/probe", "exit", "0"}}, nil)
	failing := r.aci("failing", map[string]any{"exec": []string{"/bin/probe", "sleep", "300ms", "+", "exit", "5"}}, nil)
	long := r.aci("long", map[string]any{"exec": []string{"/bin/probe", "sleep", "1h"}}, nil)
	uf := filepath.Join(r.dir, "uuid")
	out, errOut, code := r.run("--uuid-file-save="+uf, ok, failing, long)
	if code != 5 {
		t.Fatalf("rkt run: exit %d, want 5\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	b, err := os.ReadFile(uf)
	must(t, err)
	uuid := strings.TrimSpace(string(b))
	s := r.status(uuid)
	for app, want := range map[string]int{"ok": 0, "failing": 5, "long": 0} {
		if got := s.appExit(app); got != want {
			t.Errorf("rkt status: app %s exit %d, want %d (%+v)", app, got, want, s)
		}
	}
	if txt := r.rkt("status", uuid); !hasLine(txt, "^app-long=0$") || !hasLine(txt, "^app-failing=5$") {
		t.Errorf("rkt status (text):\n%s", txt)
	}
	dir := filepath.Join(r.data, "pods/exited-garbage", uuid, "stage1/rootfs/rkt/status")
	if _, err := os.Stat(dir); err != nil {
		dir = filepath.Join(r.data, "pods/run", uuid, "stage1/rootfs/rkt/status")
	}
	rec, err := status.ReadRecord(dir, "long")
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(rec)
	if rec.ExitCode == nil || *rec.ExitCode != 143 || rec.Signal != "SIGTERM" || !rec.StoppedByPod || rec.StatusCode == nil || *rec.StatusCode != 0 {
		t.Errorf("long's record: %s, want exit code 143 by SIGTERM, stopped by the pod, status 0", j)
	}
	for _, app := range []string{"ok", "failing"} {
		rec, err := status.ReadRecord(dir, app)
		if err != nil || rec.StoppedByPod || rec.StatusCode != nil {
			t.Errorf("%s's record: %+v, %v: not stopped by the pod", app, rec, err)
		}
	}
}

// A mount target reached through the image's symlinks, dangling ones
// included, makes its directories where the link points, resolved inside
// the app's root (rkt's TestMountSymlink): an absolute link to a path the
// image lacks, a relative one, and one climbing past the root with "..",
// which must land inside it.
func TestRktMountTargetThroughSymlinks(t *testing.T) {
	r := newRkt(t)
	src := filepath.Join(r.dir, "hello")
	must(t, os.WriteFile(src, []byte("world"), 0o644))
	escape := "pod1-escape-" + filepath.Base(r.dir)
	img := r.aci("mntlink", nil, map[string]aciFile{
		"dir1":                   {Mode: 0o40755},
		"dir2":                   {Mode: 0o40755},
		"dir1/link_abs_dir2":     {Mode: 0o777, Link: "/dir2"},
		"dir1/link_rel_dir2":     {Mode: 0o777, Link: "../dir2"},
		"dir1/link_abs_notexist": {Mode: 0o777, Link: "/notexists"},
		"dir1/link_up":           {Mode: 0o777, Link: "../../../../../../.."},
	})
	for target, seen := range map[string]string{
		"/dir1/link_abs_dir2/newdir/foo":            "/dir2/newdir/foo",
		"/dir1/link_rel_dir2/bar":                   "/dir2/bar",
		"/dir1/link_abs_notexist/newdir1/newdir2/f": "/notexists/newdir1/newdir2/f",
		"/dir1/link_up/" + escape + "/foo":          "/" + escape + "/foo",
		"../../../../../../../" + escape + "2/foo":  "/" + escape + "2/foo",
	} {
		out, errOut, code := r.run("--volume=v,kind=host,source="+src, img,
			"--mount=volume=v,target="+target, "--exec=/bin/probe", "--", "cat", seen)
		if code != 0 || !hasLine(out, "^cat world$") {
			t.Errorf("target %s: exit %d, want %s to hold the volume\n%s%s", target, code, seen, out, errOut)
		}
	}
	for _, p := range []string{"/" + escape, "/" + escape + "2", filepath.Join(filepath.Dir(r.dir), escape)} {
		if _, err := os.Lstat(p); err == nil {
			_ = os.RemoveAll(p)
			t.Errorf("made outside the app's root: %s", p)
		}
	}
}

// The console prints each line of an app that does not hold the terminal
// as "<app>[<pid>]: <line>", rkt's default stage1's format (its journald
// forwards the apps' lines so), pid being the app's process as the app
// sees itself: a line written in two pieces is one line; a line longer
// than 16 KiB is printed in 16 KiB pieces, each a line; a last line
// without a newline gets one; stderr's lines go to stderr; the lines of
// two apps writing at once never mix. The logs keep the raw lines.
func TestRktConsoleFormat(t *testing.T) {
	r := newRkt(t)
	long := strings.Repeat("x", 20000)
	alpha := r.aci("alpha", map[string]any{"exec": []string{"/bin/probe", "pid", "+", "raw", "1", "par", "+", "sleep", "200ms",
		"+", "raw", "1", "tial\n", "+", "raw", "1", long + "\n", "+", "raw", "2", "to stderr\n",
		"+", "out", "1", "300", "alpha-line", "+", "raw", "1", "no newline at the end"}}, nil)
	beta := r.aci("beta", map[string]any{"exec": []string{"/bin/probe", "out", "1", "500", "beta-line"}}, nil)
	uf := filepath.Join(r.dir, "uuid")
	out, errOut, code := r.run("--uuid-file-save="+uf, alpha, beta)
	if code != 0 {
		t.Fatalf("rkt run: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	m := regexp.MustCompile(`(?m)^alpha\[(\d+)\]: pid (\d+) ppid \d+$`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Fatalf("want alpha[<its pid>]: pid <its pid>, got %q in\n%.2000s", m, out)
	}
	pfx := "alpha[" + m[1] + "]: "
	want := []string{pfx + "partial", pfx + long[:16384], pfx + long[16384:], pfx + "no newline at the end"}
	all := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, w := range want {
		if !slices.Contains(all, w) {
			t.Errorf("no line %.60q... on the console", w)
		}
	}
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("the console's output does not end with a newline: %q", out[max(0, len(out)-80):])
	}
	if !slices.Contains(strings.Split(errOut, "\n"), pfx+"to stderr") {
		t.Errorf("stderr: want %q in\n%s", pfx+"to stderr", errOut)
	}
	line := regexp.MustCompile(`^(alpha\[\d+\]: (pid \d+ ppid \d+|partial|x+|alpha-line \d+|no newline at the end)|beta\[\d+\]: beta-line \d+)$`)
	n := map[string]int{}
	for _, l := range all {
		if !line.MatchString(l) {
			t.Errorf("a console line mixed or malformed: %.100q", l)
			continue
		}
		n[strings.Fields(strings.SplitN(l, ": ", 2)[1])[0]]++
	}
	if n["alpha-line"] != 300 || n["beta-line"] != 500 {
		t.Errorf("lines on the console: %v, want 300 alpha-line and 500 beta-line", n)
	}
	// The logs keep the raw line.
	b, err := os.ReadFile(uf)
	must(t, err)
	logs, _, code := pod1(t, r.data, "logs", "--app=alpha", strings.TrimSpace(string(b)))
	if code != 0 || !slices.Contains(strings.Split(logs, "\n"), "partial") || strings.Contains(logs, pfx) {
		t.Errorf("pod1 logs --app=alpha: exit %d, want the raw line \"partial\":\n%.2000s", code, logs)
	}
}

// pod1/console-format=raw gives the console the bytes as the apps wrote
// them (rkt app sandbox --annotation); a value that is neither raw nor rkt
// refuses the pod with 254, naming the annotation.
func TestRktConsoleFormatRaw(t *testing.T) {
	r := newRkt(t)
	img := r.aci("rawapp", map[string]any{"exec": []string{"/bin/probe", "raw", "1", "par", "+", "sleep", "100ms", "+", "raw", "1", "tial\nend"}}, nil)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none",
		"--annotation=pod1/console-format=raw")
	r.rkt("fetch", img)
	r.rkt("app", "add", p.UUID, "pod1.test/rawapp", "--name=rawapp")
	r.rkt("app", "start", p.UUID, "--app=rawapp")
	waitFor(t, 20*time.Second, "rawapp's output", func() bool { return strings.Contains(p.out.String(), "end") })
	r.rkt("stop", p.UUID)
	p.wait(t)
	if out := p.out.String(); !strings.Contains(out, "partial\nend") || strings.Contains(out, "rawapp[") {
		t.Errorf("raw console: %q, want the app's bytes as written", out)
	}

	out, errOut, code := r.exec(rktTimeout, nil, "app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"),
		"--net=none", "--annotation=pod1/console-format=bogus")
	if code != 254 || !strings.Contains(errOut, `pod1/console-format: "bogus"`) {
		t.Errorf("console-format=bogus: exit %d, want 254 naming the annotation\n%s%s", code, out, errOut)
	}
}

// mdsSocket is where rkt run --mds-register finds rkt's metadata service.
const mdsSocket = "/run/rkt/metadata-svc.sock"

// metadataService makes sure rkt's metadata service runs: one already
// serving the socket (another test's, rkt's suite's) is used as it is;
// else ours is started, and stopped when the test ends.
func metadataService(t *testing.T, r *rktEnv) {
	t.Helper()
	c, err := net.Dial("unix", mdsSocket)
	if err == nil {
		c.Close()
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		// A service killed before it could remove its socket: rkt's
		// own harness removes it too.
		_ = os.Remove(mdsSocket)
	}
	// The service makes its socket's directory; one it made goes with
	// it (rmdir: only if empty).
	if _, err := os.Stat(filepath.Dir(mdsSocket)); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { _ = os.Remove(filepath.Dir(mdsSocket)) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, r.bin, "metadata-service")
	// SIGTERM: it removes its socket as it exits.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.Env = r.env
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	cmd.WaitDelay = 5 * time.Second
	must(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("rkt metadata-service:\n%s", logb.String())
		}
	})
	waitFor(t, 20*time.Second, "rkt metadata-service serving "+mdsSocket, func() bool {
		c, err := net.Dial("unix", mdsSocket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// aceImage packs appc's ACE validator (github.com/appc/spec/ace, built
// from the module pod1 already requires) as rkt's suite packs it:
// /ace-validator and the manifest the spec ships for kind (main,
// sidekick), found in dir.
func aceImage(t *testing.T, r *rktEnv, bin, dir, kind string) string {
	t.Helper()
	m, err := os.ReadFile(filepath.Join(dir, "image_manifest_"+kind+".json.in"))
	must(t, err)
	m = bytes.ReplaceAll(bytes.ReplaceAll(m, []byte("@ACI_OS@"), []byte("linux")), []byte("@ACI_ARCH@"), []byte("amd64"))
	exe, err := os.ReadFile(bin)
	must(t, err)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		body []byte
		dir  bool
	}{
		{"manifest", 0o644, m, false}, {"rootfs", 0o755, nil, true}, {"rootfs/opt", 0o755, nil, true},
		{"rootfs/opt/acvalidator", 0o755, nil, true}, {"rootfs/ace-validator", 0o755, exe, false},
	} {
		h := &tar.Header{Name: f.name, Mode: f.mode, Typeflag: tar.TypeReg, Size: int64(len(f.body))}
		if f.dir {
			h.Name, h.Typeflag, h.Size = f.name+"/", tar.TypeDir, 0
		}
		must(t, tw.WriteHeader(h))
		_, err := tw.Write(f.body)
		must(t, err)
	}
	must(t, tw.Close())
	p := filepath.Join(r.dir, "ace-validator-"+kind+".aci")
	must(t, os.WriteFile(p, buf.Bytes(), 0o644))
	return p
}

// appc's ACE validator passes through the real rkt, as rkt's
// TestAceValidator runs it: a pod of its main and sidekick apps on rkt's
// default network, registered with rkt's metadata service, which the apps
// reach at the network's gateway (AC_METADATA_URL). Every check it makes
// (the eventHandlers in their order, the environment, the working
// directory, the shared volume, the mount points, the pod's and apps'
// metadata and annotations, signing through the metadata service)
// passes: a failed check exits 1, which would be the pod's code; each
// stage prints "<stage> OK" in the console's "<app>[<pid>]: " format,
// which rkt's test matches.
func TestRktAceValidator(t *testing.T) {
	if os.Getenv("POD1_TEST_EMULATED") != "" {
		// appc's validator gives each metadata request 100 ms
		// (ace/validator.go); under QEMU's emulator the pod's first
		// one, its manifest, takes longer with any stage1.
		t.Skip("an emulated VM (make vm-test with VM_ACCEL=tcg): appc's validator allows a metadata request 100 ms")
	}
	r := newRkt(t)
	bin, dir := filepath.Join(r.dir, "ace"), ""
	if _, err := exec.LookPath("go"); err != nil {
		// The VMs have no Go: make test-helpers built the validator on
		// the host and copied its manifests beside it.
		dir = filepath.Join(repoRoot, "build/ace")
		bin = filepath.Join(dir, "ace-validator")
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatalf("no go to build appc's ace validator (%v), and no %s built before (make test-helpers)", err, bin)
		}
	} else {
		b := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/appc/spec/ace")
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			t.Fatalf("build appc's ace validator: %v\n%s", err, out)
		}
		d, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/appc/spec/ace").Output()
		must(t, err)
		dir = strings.TrimSpace(string(d))
	}
	main, sidekick := aceImage(t, r, bin, dir, "main"), aceImage(t, r, bin, dir, "sidekick")
	metadataService(t, r)
	out, errOut, code := r.run("--net=default", "--mds-register", "--volume", "database,kind=empty", main, sidekick)
	if code != 0 {
		t.Fatalf("rkt run: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, w := range []string{`^ace-validator-main\[\d+\]: prestart OK$`, `^ace-validator-main\[\d+\]: main OK$`,
		`^ace-validator-sidekick\[\d+\]: sidekick OK$`, `^ace-validator-main\[\d+\]: poststop OK$`} {
		if !regexp.MustCompile("(?m)" + w).MatchString(out) {
			t.Errorf("no line %s on the console", w)
		}
	}
	if t.Failed() {
		t.Logf("stdout: %s\nstderr: %s", out, errOut)
	}
}

// The app's pid 1, pod1-pause, shows the apps' bounding set, as rkt's
// stage1's pid 1 did (rkt's TestCaps reads it with --print-caps-pid=1):
// rkt's defaults without an isolator (CAP_MKNOD, not CAP_NET_ADMIN), the
// isolator's set with one. It holds none of them, and cannot come to.
func TestRktPodInitShowsTheAppsBoundingSet(t *testing.T) {
	r := newRkt(t)
	img := r.aci("caps1", map[string]any{"exec": []string{"/bin/probe", "status-of", "1"}}, nil)
	own := ownBoundingSet(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, rktDefaultCaps},
		{[]string{"--caps-retain=CAP_NET_ADMIN,CAP_NET_BIND_SERVICE"}, []string{"CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE"}},
	} {
		out, errOut, code := r.run(append([]string{img}, tc.args...)...)
		if code != 0 {
			t.Fatalf("rkt run %q: exit %d\n%s%s", tc.args, code, out, errOut)
		}
		for _, w := range []string{
			"status-of 1 CapBnd " + capsAnd(t, capMask(t, tc.want...), own),
			"status-of 1 CapPrm 0000000000000000", "status-of 1 CapEff 0000000000000000",
			"status-of 1 NoNewPrivs 1",
		} {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("rkt run %q: missing %q in\n%s", tc.args, w, out)
			}
		}
	}
}
