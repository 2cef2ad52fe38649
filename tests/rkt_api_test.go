package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// apiClient builds tools/rkt-apiclient once per run, in rkt's source tree
// that tools/rkt-stage0/build.sh left in build/rkt/work/src (its go.mod
// has rkt's API and gRPC packages, already in the module cache: nothing is
// fetched), and returns the binary.
var apiClient = struct {
	once sync.Once
	path string
	err  error
}{}

func rktAPIClient(t *testing.T) string {
	t.Helper()
	apiClient.once.Do(func() {
		// The VMs have no Go: there the client a run on the host built
		// is used as it is.
		if _, err := exec.LookPath("go"); err != nil {
			out := filepath.Join(repoRoot, "build/rkt/rkt-apiclient")
			if _, serr := os.Stat(out); serr != nil {
				apiClient.err = fmt.Errorf("no go to build the API client (%w), and no %s built before (make test-helpers)", err, out)
			}
			apiClient.path = out
			return
		}
		src := filepath.Join(repoRoot, "build/rkt/work/src")
		if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
			apiClient.err = fmt.Errorf("rkt's source tree is missing (%w): `make rkt` leaves it", err)
			return
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, "tools/rkt-apiclient/main.go"))
		if err != nil {
			apiClient.err = err
			return
		}
		pkg := filepath.Join(src, "pod1-apiclient")
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			apiClient.err = err
			return
		}
		// Without its build constraint, which keeps it out of pod1's module.
		body := strings.Replace(string(b), "//go:build ignore\n", "", 1)
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(body), 0o644); err != nil {
			apiClient.err = err
			return
		}
		out := filepath.Join(repoRoot, "build/rkt/rkt-apiclient")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, "go", "build", "-o", out, "./pod1-apiclient")
		c.Dir = src
		c.Env = append(os.Environ(), "GO111MODULE=on", "GOWORK=off", "GOTOOLCHAIN=local", "GOPROXY=off",
			"CGO_ENABLED=0", "GOFLAGS=-modcacherw -buildvcs=false -mod=readonly")
		if o, err := c.CombinedOutput(); err != nil {
			apiClient.err = fmt.Errorf("build the API client: %w: %s", err, o)
			return
		}
		apiClient.path = out
	})
	if apiClient.err != nil {
		t.Fatal(apiClient.err)
	}
	return apiClient.path
}

// apiPod is one pod as rkt's API service lists it (tools/rkt-apiclient).
type apiPod struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Pid    int    `json:"pid"`
	Cgroup string `json:"cgroup"`
}

// apiService runs `rkt api-service` on the test's data directory, on a
// port of its own, until the test ends.
func (r *rktEnv) apiService() string {
	r.t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(r.t))
	ctx, cancel := context.WithCancel(context.Background())
	c := exec.CommandContext(ctx, r.bin, "--dir="+r.data, "api-service", "--listen="+addr)
	c.Env = r.env
	c.Dir = r.dir
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	c.WaitDelay = 10 * time.Second
	outR, outW, err := os.Pipe()
	must(r.t, err)
	c.Stdout, c.Stderr = outW, outW
	must(r.t, c.Start())
	outW.Close()
	ready := make(chan struct{})
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if strings.Contains(sc.Text(), "API service running") {
				close(ready)
			}
		}
	}()
	r.t.Cleanup(func() {
		cancel()
		_ = c.Wait()
		outR.Close()
	})
	select {
	case <-ready:
	case <-time.After(rktTimeout):
		logMu.Lock()
		defer logMu.Unlock()
		r.t.Fatalf("rkt api-service did not start within %v:\n%s", rktTimeout, log.String())
	}
	return addr
}

// listPods asks the API service at addr for its pods, with filters
// (cgroup=PATH, subcgroup=PATH) if given.
func (r *rktEnv) listPods(addr string, filters ...string) []apiPod {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rktTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, rktAPIClient(r.t), append([]string{addr}, filters...)...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		r.t.Fatalf("rkt-apiclient %s %v: %v: %s", addr, filters, err, stderr.String())
	}
	var pods []apiPod
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p apiPod
		if err := dec.Decode(&p); err != nil {
			if !errors.Is(err, io.EOF) {
				r.t.Fatalf("rkt-apiclient output: %v: %s", err, out)
			}
			break
		}
		pods = append(pods, p)
	}
	return pods
}

func findAPIPod(pods []apiPod, uuid string) *apiPod {
	for i := range pods {
		if pods[i].ID == uuid {
			return &pods[i]
		}
	}
	return nil
}

// rkt's API service finds a running pod1 pod by its cgroup, as rkt's
// TestAPIServiceCgroup and the tools that find rkt's pods by cgroup do:
// the cgroup it reports ends in /machine-rkt\x2d<uuid>.scope (rkt's
// stage1's name), it is where the pod's PID 1 really is, and the cgroup
// filter and the sub-cgroup filter (the pod's cgroup a prefix of the one
// asked about) each select the pod and no other. An exited pod has no
// cgroup.
func TestRktAPIServiceCgroup(t *testing.T) {
	r := newRkt(t)
	img := r.aci("srv", map[string]any{"exec": []string{"/bin/probe", "term-exit", "0", "+", "sleep", "1h"}}, nil)
	p := r.start("run", img)
	addr := r.apiService()

	pods := r.listPods(addr)
	got := findAPIPod(pods, p.UUID)
	if got == nil {
		t.Fatalf("the API service does not list pod %s: %+v", p.UUID, pods)
	}
	if got.State != "POD_STATE_RUNNING" {
		t.Errorf("state %s, want POD_STATE_RUNNING", got.State)
	}
	// Spelt out as rkt's test spells it, not taken from the code under
	// test.
	want := "/machine-" + strings.ReplaceAll("rkt-"+p.UUID, "-", `\x2d`) + ".scope"
	if !strings.HasSuffix(got.Cgroup, want) {
		t.Fatalf("the API service's cgroup of the pod is %q, want it to end in %q", got.Cgroup, want)
	}
	// It is where the pod is: PID 1 in its stage1 child, in the
	// hierarchy the path is of (the cgroup2 tree where there is one).
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(r.pid(p.UUID)), "cgroup"))
	must(t, err)
	if !inCgroup(string(b), got.Cgroup+"/stage1") {
		t.Errorf("the pod's PID 1 is not in %s/stage1:\n%s", got.Cgroup, b)
	}
	sub, err := os.ReadFile(filepath.Join(r.data, "pods/run", p.UUID, layout.Subcgroup))
	must(t, err)
	if "/"+string(sub) != got.Cgroup {
		t.Errorf("subcgroup file %q, API service %q", sub, got.Cgroup)
	}

	for _, f := range []string{"cgroup=" + got.Cgroup, "subcgroup=" + got.Cgroup + "/system.slice"} {
		if l := r.listPods(addr, f); len(l) != 1 || l[0].ID != p.UUID {
			t.Errorf("filter %s: %+v, want the pod alone", f, l)
		}
	}
	other := filepath.Join(filepath.Dir(got.Cgroup), cgroups.PodName(newUUID(t)))
	for _, f := range []string{"cgroup=" + other, "subcgroup=" + other + "/system.slice"} {
		if l := r.listPods(addr, f); len(l) != 0 {
			t.Errorf("filter %s: %+v, want no pod", f, l)
		}
	}

	r.rkt("stop", p.UUID)
	if code := p.wait(t); code != 0 {
		t.Errorf("rkt run after rkt stop: exit %d\n%s", code, p.errb)
	}
	if got := findAPIPod(r.listPods(addr), p.UUID); got == nil || got.Cgroup != "" {
		t.Errorf("after the pod exited the API service lists %+v, want it with no cgroup", got)
	}
}

// inCgroup reports whether a /proc/PID/cgroup content puts the process in
// path: in the cgroup2 tree if it has one, else in the pids hierarchy.
func inCgroup(procCgroup, path string) bool {
	v2, pids := "", ""
	for _, l := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "pids" {
				pids = f[2]
			}
		}
	}
	if v2 != "" {
		return v2 == path
	}
	return pids == path
}
