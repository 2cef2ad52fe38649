package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podlog"
)

// nsPod is a pod started by `pod1 run` inside a logNS.
type nsPod struct {
	UUID, Dir string
	Stdout    *bytes.Buffer
	Stderr    *bytes.Buffer
	done      chan struct{}
	pid       int
}

// runInNS starts `pod1 run` in ns with the probe image; each app is
// "--name=N -- probe args...", apps separated by "---". N may be followed
// by more of the app's flags, blank-separated ("web --user=1000").
func runInNS(t *testing.T, ns *logNS, data string, apps ...[]string) *nsPod {
	t.Helper()
	uuidFile := filepath.Join(t.TempDir(), "uuid")
	img := probeACIDir(t)
	args := []string{bin("pod1"), "run", "--dir=" + data, "--stage1-path=" + stage1ACI(t), "--net=none", "--no-overlay", "--uuid-file-save=" + uuidFile}
	for i, a := range apps {
		if i > 0 {
			args = append(args, "---")
		}
		f := strings.Fields(a[0])
		args = append(append(append(append(args, img, "--name="+f[0]), f[1:]...), "--exec=/bin/probe", "--"), a[1:]...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	cmd := ns.cmd(ctx, "/", args...)
	p := &nsPod{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	cmd.WaitDelay = time.Second
	must(t, cmd.Start())
	p.pid = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	waitFor(t, 30*time.Second, "the pod's UUID", func() bool {
		b, err := os.ReadFile(uuidFile)
		p.UUID = strings.TrimSpace(string(b))
		return err == nil && p.UUID != ""
	})
	ownPod(p.UUID)
	p.Dir = filepath.Join(data, "pods/run", p.UUID)
	return p
}

func (p *nsPod) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(eventDeadline):
		t.Fatalf("pod %s did not end", p.UUID)
	}
}

// Without a journal each app's lines go to its file in the pod directory,
// which pod1 logs reads after the pod has exited: all apps merged by time
// and prefixed, or one app, or those since a time.
func TestLogFilesAndPod1Logs(t *testing.T) {
	ns := newLogNS(t, false)
	data := dataDir(t)
	p := runInNS(t, ns, data,
		[]string{"a", "out", "1", "3", "a-out", "+", "out", "2", "2", "a-err", "+", "raw", "1", "a-tail"},
		[]string{"b", "out", "1", "3", "b-out"})
	p.wait(t)
	t.Logf("pod1 run: stdout %q, stderr %q", p.Stdout, p.Stderr)
	for _, a := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(p.Dir, layout.LogDir, podlog.FileName(a))); err != nil {
			t.Fatalf("no log file for %s: %v (stderr %s)", a, err, p.Stderr)
		}
	}
	if !strings.Contains(p.Stdout.String(), "a-out 2\n") || !strings.Contains(p.Stderr.String(), "a-err 1\n") {
		t.Errorf("the console lost lines: stdout %q stderr %q", p.Stdout, p.Stderr)
	}
	out, errOut, code := pod1(t, data, "logs", p.UUID)
	if code != 0 {
		t.Fatalf("pod1 logs: %d %s", code, errOut)
	}
	for _, want := range []string{"a: a-out 0", "a: a-out 2", "a: a-err 1", "a: a-tail", "b: b-out 0", "b: b-out 2"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("pod1 logs lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 9 {
		t.Errorf("pod1 logs printed %d lines, want 9:\n%s", n, out)
	}
	out, _, code = pod1(t, data, "logs", "--app=a", p.UUID)
	if code != 0 || !strings.HasPrefix(out, "a-") || strings.Contains(out, "b-out") || !strings.Contains(out, "a-err 0\n") {
		t.Errorf("pod1 logs --app=a: %d\n%s", code, out)
	}
	if out, _, _ = pod1(t, data, "logs", "--since=1h", p.UUID); strings.Count(out, "\n") != 9 {
		t.Errorf("--since=1h: %q", out)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if out, _, _ = pod1(t, data, "logs", "--since="+future, p.UUID); out != "" {
		t.Errorf("--since=%s: %q", future, out)
	}
	for _, bad := range [][]string{{"--since=yesterday"}, {"--app=nope"}} {
		if _, e, code := pod1(t, data, append(append([]string{"logs"}, bad...), p.UUID)...); code != 254 || strings.Count(e, "\n") != 1 {
			t.Errorf("pod1 logs %v: %d %q", bad, code, e)
		}
	}
}

// The files keep what the app wrote before its stage1 was SIGKILLed; pod1
// logs reads them once the pod is gone.
func TestLogFilesAfterStage1Kill(t *testing.T) {
	ns := newLogNS(t, false)
	data := dataDir(t)
	p := runInNS(t, ns, data, []string{"k", "out", "1", "5", "k-line", "+", "sleep", "1h"})
	waitFor(t, 20*time.Second, "five lines in the log file", func() bool {
		b, _ := os.ReadFile(filepath.Join(p.Dir, layout.LogDir, podlog.FileName("k")))
		return bytes.Count(b, []byte("\n")) == 5
	})
	must(t, syscall.Kill(p.pid, syscall.SIGKILL))
	p.wait(t)
	st, _, _ := pod1(t, data, "status", p.UUID)
	if !strings.Contains(st, "state=exited") {
		t.Fatalf("pod not exited after the kill:\n%s", st)
	}
	out, e, code := pod1(t, data, "logs", "--app=k", p.UUID)
	if code != 0 || out != "k-line 0\nk-line 1\nk-line 2\nk-line 3\nk-line 4\n" {
		t.Errorf("pod1 logs: %d %q %s", code, out, e)
	}
}

// --follow prints lines as they come and returns once the pod has exited,
// with every line.
func TestPod1LogsFollow(t *testing.T) {
	ns := newLogNS(t, false)
	data := dataDir(t)
	p := runInNS(t, ns, data, []string{"f", "out", "1", "2", "first", "+", "wait-file", "/tmp/go", "+", "out", "2", "2", "second"})
	waitFor(t, 20*time.Second, "the log file", func() bool {
		_, err := os.Stat(filepath.Join(p.Dir, layout.LogDir, podlog.FileName("f")))
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	cmd := ns.cmd(ctx, "/", bin("pod1"), "--dir="+data, "logs", "--follow", "--app=f", p.UUID)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	waitFor(t, 20*time.Second, "the first lines from pod1 logs --follow", func() bool {
		return strings.Contains(out.String(), "first 1\n")
	})
	must(t, os.WriteFile(filepath.Join(p.Dir, "stage1/rootfs/opt/stage2/f/rootfs/tmp/go"), nil, 0o644))
	p.wait(t)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pod1 logs --follow: %v %s", err, out.String())
	}
	if got := out.String(); got != "first 0\nfirst 1\nsecond 0\nsecond 1\n" {
		t.Errorf("pod1 logs --follow printed %q", got)
	}
}

// With rkt's k8s-plain log mode each app also writes its CRI log file,
// byte for byte the format rkt's own stage1 (iottymux) writes: time,
// stream, line, without kubelet's later F/P tag.
func TestCRILogs(t *testing.T) {
	logDir := t.TempDir()
	mk := func(path string, podAnns map[string]string) *Pod {
		apps := []App{{Name: "web", Exec: probe("out", "1", "2", "o", "+", "out", "2", "1", "e", "+", "raw", "1", "tail"),
			Annotations: map[string]string{"coreos.com/rkt/experiment/kubernetes-log-path": path}}}
		return newPodRaw(t, manifestAnn(apps, nil, podAnns), apps)
	}
	anns := map[string]string{
		"coreos.com/rkt/experiment/logmode":            "k8s-plain",
		"coreos.com/rkt/experiment/kubernetes-log-dir": logDir,
	}
	p := mk("web_0.log", anns)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(filepath.Join(logDir, "web_0.log"))
	must(t, err)
	rec := regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z) (stdout|stderr) (.*)$`)
	var got []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		m := rec.FindStringSubmatch(strings.TrimSuffix(l, "\n"))
		if m == nil || !strings.HasSuffix(l, "\n") {
			t.Fatalf("not a CRI record: %q", l)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || ts.UTC().Format(time.RFC3339Nano) != m[1] {
			t.Errorf("time %q is not RFC 3339 with nanoseconds as Go writes it", m[1])
		}
		got = append(got, m[3]+" "+m[4])
	}
	var out, errs []string
	for _, g := range got {
		if strings.HasPrefix(g, "stdout ") {
			out = append(out, g)
		} else {
			errs = append(errs, g)
		}
	}
	if fmt.Sprint(out) != "[stdout o 0 stdout o 1 stdout tail]" || fmt.Sprint(errs) != "[stderr e 0]" {
		t.Errorf("CRI records %q", got)
	}

	for _, bad := range []struct {
		path string
		anns map[string]string
		msg  string
	}{
		{"../escape.log", anns, "kubernetes-log-path: \"../escape.log\" must be a file name"},
		{"x.log", map[string]string{"coreos.com/rkt/experiment/logmode": "k8s-plain"}, "kubernetes-log-dir: required"},
		{"x.log", map[string]string{"coreos.com/rkt/experiment/logmode": "json"}, "logmode: \"json\" is not supported"},
		{"x.log", withAnn(anns, "pod1/cri-log-format", "docker"), "pod1/cri-log-format: \"docker\" is not one of rkt, kubelet"},
		{"x.log", map[string]string{"pod1/cri-log-format": "kubelet"}, "pod1/cri-log-format: only with coreos.com/rkt/experiment/logmode=k8s-plain"},
	} {
		p := mk(bad.path, bad.anns)
		r := runPod(t, p, RunOpts{})
		if r.Code != 254 || !strings.Contains(r.Stderr.String(), bad.msg) || strings.Count(r.Stderr.String(), "\n") != 1 {
			t.Errorf("%s %v: exit %d, stderr %q", bad.path, bad.anns, r.Code, r.Stderr)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(logDir), "escape.log")); err == nil {
		t.Error("a CRI log path escaped the log directory")
	}
}

// withAnn is anns with name=value added.
func withAnn(anns map[string]string, name, value string) map[string]string {
	m := map[string]string{name: value}
	for k, v := range anns {
		m[k] = v
	}
	return m
}

// With pod1/cri-log-format=kubelet the CRI file is in the format current
// kubelets read, byte for byte: "<time> <stream> F|P <line>", a line
// longer than 16 KiB in P records of 16 KiB and an F record for its
// rest, a last line without a newline a P record (kubelet adds a newline
// to F records only, so it reads back what the app wrote).
func TestCRILogsKubeletFormat(t *testing.T) {
	logDir := t.TempDir()
	apps := []App{{Name: "web", Exec: probe("out", "1", "2", "o", "+", "lines", "1", "40000", "/dev/null",
		"+", "out", "2", "1", "e", "+", "raw", "1", "tail"),
		Annotations: map[string]string{"coreos.com/rkt/experiment/kubernetes-log-path": "web_0.log"}}}
	p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{
		"coreos.com/rkt/experiment/logmode":            "k8s-plain",
		"coreos.com/rkt/experiment/kubernetes-log-dir": logDir,
		"pod1/cri-log-format":                          "kubelet",
	}), apps)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(filepath.Join(logDir, "web_0.log"))
	must(t, err)
	ts := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$`)
	// The streams' records interleave as PID 1 reads them; each
	// stream's are in order.
	var out, errs strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		tm, rest, _ := strings.Cut(l, " ")
		if !ts.MatchString(tm) || !strings.HasSuffix(l, "\n") {
			t.Fatalf("not a CRI record: %q", l[:min(len(l), 60)])
		}
		if strings.HasPrefix(rest, "stderr ") {
			errs.WriteString(rest)
		} else {
			out.WriteString(rest)
		}
	}
	x := strings.Repeat("x", 16<<10)
	wantOut := "stdout F o 0\nstdout F o 1\n" +
		"stdout P " + x + "\nstdout P " + x + "\nstdout F " + strings.Repeat("x", 39999-2*len(x)) + "\n" +
		"stdout P tail\n"
	if got := out.String(); got != wantOut {
		i := 0
		for i < min(len(got), len(wantOut)) && got[i] == wantOut[i] {
			i++
		}
		t.Errorf("stdout records differ at byte %d: got %q, want %q", i, got[i:min(len(got), i+40)], wantOut[i:min(len(wantOut), i+40)])
	}
	if got := errs.String(); got != "stderr F e 0\n" {
		t.Errorf("stderr records %q", got)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pod1 logs on a terminal shows an app's control characters instead of
// writing them raw to the administrator's terminal, which they could
// retitle, clear or type into; into a pipe the bytes stay as the app wrote
// them, and --escape forces either way.
func TestPod1LogsEscapesControlsOnATerminal(t *testing.T) {
	ns := newLogNS(t, false)
	data := dataDir(t)
	hostile := "t\x1b]0;pwned\x07\x1b[2J\tx\r\xc2\x9b\xe2\x80\xae\\z\n"
	p := runInNS(t, ns, data, []string{"e", "raw", "1", hostile})
	p.wait(t)
	shown := `t\x1b]0;pwned\x07\x1b[2J` + "\tx" + `\x0d\xc2\x9b\xe2\x80\xae\z`
	// Into a pipe: the bytes as they were.
	out, errOut, code := pod1(t, data, "logs", "--app=e", p.UUID)
	if code != 0 || out != hostile {
		t.Fatalf("pod1 logs into a pipe: %d %q %s, want %q", code, out, errOut, hostile)
	}
	if out, _, _ := pod1(t, data, "logs", "--escape=always", "--app=e", p.UUID); out != shown+"\n" {
		t.Errorf("--escape=always: %q, want %q", out, shown+"\n")
	}
	if _, e, code := pod1(t, data, "logs", "--escape=maybe", p.UUID); code != 254 || !strings.Contains(e, "--escape") || strings.Count(e, "\n") != 1 {
		t.Errorf("--escape=maybe: %d %q", code, e)
	}
	onTerminal := func(args ...string) string {
		master, slave := openPTY(t)
		// Raw mode: the terminal passes what pod1 writes as it is.
		tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		must(t, err)
		tio.Oflag &^= unix.OPOST
		must(t, unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio))
		ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin("pod1"), append([]string{"--dir=" + data, "logs"}, append(args, p.UUID)...)...)
		cmd.Stdout = slave
		var e bytes.Buffer
		cmd.Stderr = &e
		err = cmd.Run()
		slave.Close()
		if err != nil {
			t.Fatalf("pod1 logs %v on a terminal: %v %s", args, err, e.String())
		}
		var got []byte
		buf := make([]byte, 4096)
		for {
			// Reading the master after the slave is closed ends with EIO.
			n, err := master.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		return string(got)
	}
	if got := onTerminal("--app=e"); got != shown+"\n" {
		t.Errorf("on a terminal: %q, want %q", got, shown+"\n")
	}
	if got := onTerminal("--app=e", "--escape=never"); got != hostile {
		t.Errorf("--escape=never on a terminal: %q, want %q", got, hostile)
	}
}
