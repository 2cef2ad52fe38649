package tests

// Helpers for the tests that drive pod1 through the real rkt v1.30.0
// stage0 (build/rkt/rkt, built by `make test` with tools/rkt-stage0): rkt
// fetches the images, renders the pod directory and execs our stage1, so
// these tests see what a rkt user sees.

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/status"
)

// rktTimeout bounds one rkt command; a pod that should outlive it is
// started with rktStart. Like every wait of the tests it is at least the
// event deadline: a slow machine must not fail a command that works.
var rktTimeout = max(60*time.Second, eventDeadline)

// rktBin is the real rkt; its absence fails the test (never a skip: CI
// must not pass without having run rkt).
func rktBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("POD1_RKT")
	if p == "" {
		p = filepath.Join(repoRoot, "build/rkt/rkt")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the real rkt is missing (%v): `make test` builds it with tools/rkt-stage0/build.sh, or `make rkt`", err)
	}
	return p
}

// rktEnv is one rkt data directory (--dir) of a test, gc'd and unmounted
// when the test ends.
type rktEnv struct {
	t    *testing.T
	bin  string
	dir  string // scratch: images, host volumes
	data string // rkt --dir
	env  []string
}

func newRkt(t *testing.T) *rktEnv {
	t.Helper()
	r := &rktEnv{t: t, bin: rktBin(t), dir: t.TempDir()}
	r.data = filepath.Join(r.dir, "data")
	must(t, os.Mkdir(r.data, 0o755))
	r.env = append(os.Environ(), "RKT_EXPERIMENT_APP=true", "TMPDIR="+r.dir)
	// Registered after TempDir, so it runs before the removal.
	t.Cleanup(r.cleanup)
	return r
}

// cleanup stops every pod still running, gc's them all (our stage1's gc
// included) and unmounts whatever is left under the test's directory.
func (r *rktEnv) cleanup() {
	// Before gc removes them: these pods are this run's
	// (runCheckingCgroups).
	ownPodsUnder(r.data)
	out, _, _ := r.exec(rktTimeout, nil, "list", "--full", "--no-legend")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(l, "running") {
			r.exec(rktTimeout, nil, "stop", "--force", f[0])
		}
	}
	if _, errOut, code := r.exec(rktTimeout, nil, "gc", "--grace-period=0s"); code != 0 {
		r.t.Errorf("rkt gc: exit %d: %s", code, errOut)
	}
	if err := launch.UnmountAll(r.dir); err != nil {
		r.t.Errorf("unmount %s: %v", r.dir, err)
	}
}

func (r *rktEnv) cmd(ctx context.Context, stdin []byte, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	full := append([]string{"--dir=" + r.data, "--insecure-options=image"}, args...)
	c := exec.CommandContext(ctx, r.bin, full...)
	c.Env = r.env
	c.Dir = r.dir
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	c.WaitDelay = 5 * time.Second
	return c, &o, &e
}

// exec runs one rkt command to its end and returns stdout, stderr and the
// exit code (-1 if it could not run or was killed at the timeout).
func (r *rktEnv) exec(timeout time.Duration, stdin []byte, args ...string) (string, string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, o, e := r.cmd(ctx, stdin, args...)
	err := c.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
	}
	if ctx.Err() != nil {
		e.WriteString("\n(killed: rkt did not finish within " + timeout.String() + ")")
	}
	return o.String(), e.String(), code
}

// rkt runs a command that must succeed and returns its stdout.
func (r *rktEnv) rkt(args ...string) string {
	r.t.Helper()
	o, e, code := r.exec(rktTimeout, nil, args...)
	if code != 0 {
		r.t.Fatalf("rkt %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, o, e)
	}
	return o
}

// run is `rkt run` of images with our stage1 and --net=none unless other
// flags come first; it returns stdout, stderr and the exit code.
func (r *rktEnv) run(args ...string) (string, string, int) {
	r.t.Helper()
	return r.exec(rktTimeout, nil, r.runArgs("run", args)...)
}

func (r *rktEnv) runArgs(verb string, args []string) []string {
	a := []string{verb, "--stage1-path=" + filepath.Join(repoRoot, "build/stage1.aci")}
	net := false
	for _, x := range args {
		if strings.HasPrefix(x, "--net") {
			net = true
		}
	}
	if !net {
		a = append(a, "--net=none")
	}
	return append(a, args...)
}

// rktPod is a pod started in the background.
type rktPod struct {
	UUID   string
	cmd    *exec.Cmd
	out    *bytes.Buffer
	errb   *bytes.Buffer
	cancel context.CancelFunc
	done   chan struct{}
	code   int
}

// start is `rkt run` (or any pod-starting verb) in the background; it
// returns once rkt has saved the pod's UUID and the pod is running.
func (r *rktEnv) start(verb string, args ...string) *rktPod {
	r.t.Helper()
	return r.startWith(verb, nil, args...)
}

// startWith is start with setup applied to rkt's command before it starts
// (its stdio, its session).
func (r *rktEnv) startWith(verb string, setup func(*exec.Cmd), args ...string) *rktPod {
	r.t.Helper()
	uf := filepath.Join(r.dir, "uuid-"+newUUID(r.t))
	var full []string
	if verb == "run" {
		full = r.runArgs("run", append([]string{"--uuid-file-save=" + uf}, args...))
	} else {
		full = append([]string{verb, "--uuid-file-save=" + uf}, args...)
	}
	// The pod lives until the test stops it or its cleanup cancels it: no
	// lifetime of a fixed length, which a slow machine would outlive.
	ctx, cancel := context.WithCancel(context.Background())
	c, o, e := r.cmd(ctx, nil, full...)
	p := &rktPod{cmd: c, out: o, errb: e, cancel: cancel, done: make(chan struct{})}
	if setup != nil {
		setup(c)
	}
	must(r.t, c.Start())
	go func() {
		err := c.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	r.t.Cleanup(func() {
		cancel()
		<-p.done
	})
	waitFor(r.t, 30*time.Second, "rkt saved the pod's UUID", func() bool {
		select {
		case <-p.done:
			r.t.Fatalf("rkt %s exited %d before the pod ran\nstdout: %s\nstderr: %s", verb, p.code, o, e)
		default:
		}
		b, err := os.ReadFile(uf)
		if err == nil && len(b) > 0 {
			p.UUID = strings.TrimSpace(string(b))
			ownPod(p.UUID)
			return true
		}
		return false
	})
	waitFor(r.t, 30*time.Second, "the pod is running", func() bool {
		return r.podState(p.UUID) == "running"
	})
	// rkt app add refuses a sandbox whose supervisor is not ready yet.
	ready := filepath.Join(r.data, "pods/run", p.UUID, "stage1/rootfs/rkt/supervisor-status")
	waitFor(r.t, 30*time.Second, "the pod's supervisor is ready", func() bool {
		l, _ := os.Readlink(ready)
		return l == "ready"
	})
	return p
}

// wait waits for the background rkt to exit and returns its exit code.
func (p *rktPod) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(rktTimeout):
		t.Fatalf("rkt did not exit within %v\nstdout: %s\nstderr: %s", rktTimeout, p.out, p.errb)
	}
	return p.code
}

// rktPodStatus is what `rkt status --format=json` prints.
type rktPodStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Apps  []struct {
		Name     string `json:"name"`
		State    string `json:"state"`
		ExitCode *int   `json:"exit_code"`
	} `json:"apps"`
}

func (r *rktEnv) status(uuid string) rktPodStatus {
	r.t.Helper()
	var s rktPodStatus
	out := r.rkt("status", "--format=json", uuid)
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		r.t.Fatalf("rkt status --format=json: %v: %s", err, out)
	}
	return s
}

// pid is the pod's PID 1 as `rkt status` reports it.
func (r *rktEnv) pid(uuid string) int {
	r.t.Helper()
	out := r.rkt("status", uuid)
	m := regexp.MustCompile(`(?m)^pid=(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		r.t.Fatalf("rkt status: no pid= line:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func (r *rktEnv) podState(uuid string) string {
	o, _, code := r.exec(rktTimeout, nil, "status", "--format=json", uuid)
	if code != 0 {
		return ""
	}
	var s rktPodStatus
	if json.Unmarshal([]byte(o), &s) != nil {
		return ""
	}
	return s.State
}

// appExit is an app's exit code as rkt reports it, -1 if it has none.
func (s rktPodStatus) appExit(name string) int {
	for _, a := range s.Apps {
		if a.Name == name && a.ExitCode != nil {
			return *a.ExitCode
		}
	}
	return -1
}

// aciFile is one extra file of a test image's rootfs.
type aciFile struct {
	Mode     int64 // with the type bits of tar (0o040000 a directory)
	Body     string
	Link     string // a symlink's target
	UID, GID int
}

// aci writes an image of the probe: name, the app part of the image
// manifest (exec and the rest; user and group default to 0), extra
// rootfs files. It returns the file's path.
func (r *rktEnv) aci(name string, app map[string]any, files map[string]aciFile) string {
	r.t.Helper()
	if app == nil {
		app = map[string]any{}
	}
	if _, ok := app["user"]; !ok {
		app["user"] = "0"
	}
	if _, ok := app["group"]; !ok {
		app["group"] = "0"
	}
	if _, ok := app["exec"]; !ok {
		app["exec"] = []string{"/bin/probe", "exit", "0"}
	}
	m, err := json.Marshal(map[string]any{
		"acKind": "ImageManifest", "acVersion": "0.8.11", "name": "pod1.test/" + name,
		"labels": []map[string]string{{"name": "version", "value": "1"}, {"name": "os", "value": "linux"}, {"name": "arch", "value": "amd64"}},
		"app":    app,
	})
	must(r.t, err)
	probeBin, err := os.ReadFile(bin("probe"))
	must(r.t, err)
	all := map[string]aciFile{
		"bin":        {Mode: 0o40755},
		"bin/probe":  {Mode: 0o755, Body: string(probeBin)},
		"etc":        {Mode: 0o40755},
		"etc/passwd": {Mode: 0o644, Body: "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/:/bin/sh\n"},
		"etc/group":  {Mode: 0o644, Body: "root:x:0:\nstaff:x:50:\nuser:x:1000:\n"},
		"tmp":        {Mode: 0o41777},
	}
	for k, v := range files {
		all[k] = v
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) { must(r.t, tw.WriteHeader(h)) }
	hdr(&tar.Header{Name: "manifest", Mode: 0o644, Size: int64(len(m)), Typeflag: tar.TypeReg})
	_, err = tw.Write(m)
	must(r.t, err)
	hdr(&tar.Header{Name: "rootfs/", Mode: 0o755, Typeflag: tar.TypeDir})
	for _, k := range sortedPaths(all) {
		f := all[k]
		h := &tar.Header{Name: "rootfs/" + k, Mode: f.Mode & 0o7777, Uid: f.UID, Gid: f.GID}
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		case f.Mode&0o40000 != 0:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Body))
		}
		hdr(h)
		if h.Typeflag == tar.TypeReg {
			_, err = tw.Write([]byte(f.Body))
			must(r.t, err)
		}
	}
	must(r.t, tw.Close())
	p := filepath.Join(r.dir, name+".aci")
	must(r.t, os.WriteFile(p, buf.Bytes(), 0o644))
	return p
}

// sortedPaths orders paths so that a directory comes before what is in it.
func sortedPaths(m map[string]aciFile) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// lines returns the lines of out that start with prefix.
func lines(out, prefix string) []string {
	var l []string
	for _, x := range strings.Split(out, "\n") {
		// rkt prefixes the stage1's output in some modes: be tolerant.
		if i := strings.Index(x, prefix); i >= 0 {
			l = append(l, x[i:])
		}
	}
	return l
}

// hasLine reports whether a line of out matches the regular expression,
// each line taken without the "<app>[<pid>]: " the console prefixes it
// with (pod1's default console format, rkt's: TestRktConsoleFormat).
func hasLine(out, re string) bool {
	return regexp.MustCompile("(?m)" + re).MatchString(unprefixed(out))
}

var consolePrefixRe = regexp.MustCompile(`(?m)^[a-z0-9][a-z0-9-]*\[\d+\]: `)

// unprefixed is out with each line's console prefix removed.
func unprefixed(out string) string {
	return consolePrefixRe.ReplaceAllString(out, "")
}

// appPid is the host pid of a running app of a pod rkt started, from the
// stage1's JSON status record.
func (r *rktEnv) appPid(uuid, app string) int {
	r.t.Helper()
	dir := filepath.Join(r.data, "pods/run", uuid, "stage1/rootfs/rkt/status")
	var pid int
	waitFor(r.t, 20*time.Second, "app "+app+" running", func() bool {
		rec, err := status.ReadRecord(dir, app)
		if err != nil || rec.State != status.StateRunning {
			return false
		}
		pid = rec.Pid
		// Running is recorded at the fork: wait for the app's own exec.
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		return pid > 0 && strings.HasPrefix(string(cmd), "/bin/probe\x00")
	})
	return pid
}

// patchManifest inserts JSON members at the start of an ACI's manifest
// object (after its opening brace).
func patchManifest(t *testing.T, aci, members string) {
	t.Helper()
	b, err := os.ReadFile(aci)
	must(t, err)
	tr := tar.NewReader(bytes.NewReader(b))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		body := new(bytes.Buffer)
		_, err = body.ReadFrom(tr)
		must(t, err)
		data := body.Bytes()
		if h.Name == "manifest" {
			data = []byte("{" + members + string(data[1:]))
			h.Size = int64(len(data))
		}
		must(t, tw.WriteHeader(h))
		_, err = tw.Write(data)
		must(t, err)
	}
	must(t, tw.Close())
	must(t, os.WriteFile(aci, out.Bytes(), 0o644))
}
