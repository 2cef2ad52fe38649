package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pod1/pod1/layout"
)

// probeACIWithPort is the probe's image declaring the app port http
// (tcp/8080), which --port=http:HOSTPORT forwards to.
func probeACIWithPort(t *testing.T) string {
	t.Helper()
	img := probeACIDir(t)
	mf := filepath.Join(img, "manifest")
	var m map[string]any
	b, err := os.ReadFile(mf)
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	m["app"].(map[string]any)["ports"] = []map[string]any{{"name": "http", "protocol": "tcp", "port": 8080}}
	b, err = json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(mf, b, 0o644))
	return img
}

// gcAtEnd registers pod1 gc of data to run after the test's pods have
// stopped (cleanups run last first): no network of theirs outlives it.
func gcAtEnd(t *testing.T, data string) {
	t.Helper()
	t.Cleanup(func() { pod1(t, data, "gc", "--grace-period=0s") })
}

// refusedLine checks that a pod's start was refused for a host port
// another pod forwards: exit 254 and one line on stderr naming the port
// and the pod that has it.
func refusedLine(t *testing.T, code int, stderr string, hostPort int, owner string) {
	t.Helper()
	var stage1 []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.Contains(l, "stage1") || strings.Contains(l, "host port") {
			stage1 = append(stage1, l)
		}
	}
	if code != 254 || len(stage1) != 1 || !strings.Contains(stage1[0], "host port tcp/"+itoa(hostPort)+" ") || !strings.Contains(stage1[0], owner) {
		t.Errorf("exit %d, stderr:\n%s\nwant 254 and one line naming host port tcp/%d and pod %s", code, stderr, hostPort, owner)
	}
}

// A pod1 run asking for a host port that a running pod forwards is
// refused before anything of it starts, with one line naming the port
// and that pod, whether that pod is of the same data directory (its lock
// says it runs) or of another (its network namespace has its processes);
// it leaves nothing behind, and the port still reaches the first pod.
func TestNetPortTakenPod1Run(t *testing.T) {
	for _, where := range []string{"same-dir", "other-dir"} {
		t.Run(where, func(t *testing.T) {
			img := probeACIWithPort(t)
			data := dataDir(t)
			gcAtEnd(t, data)
			data2 := data
			if where == "other-dir" {
				data2 = dataDir(t)
				gcAtEnd(t, data2)
			}
			hp := freePort(t)
			first := runBG(t, data, "--net=default", "--port=http:"+itoa(hp), img, "--exec=/bin/probe", "--", "serve", "0.0.0.0:8080", "1")
			first.waitPid(t) // written after the network's setup
			hp2 := freePort(t)
			if where == "same-dir" {
				// The pod directory is no witness: the first pod's
				// record hides its port and claims another.
				rewritePorts(t, first.Dir, hp2)
			}
			uf := filepath.Join(t.TempDir(), "uuid")
			_, errOut, code := pod1(t, data2, "run", "--stage1-path="+stage1ACI(t), "--uuid-file-save="+uf,
				"--net=default", "--port=http:"+itoa(hp), img, "--exec=/bin/probe", "--", "exit", "0")
			refusedLine(t, code, errOut, hp, first.UUID)
			b, err := os.ReadFile(uf)
			must(t, err)
			second := &Pod{UUID: strings.TrimSpace(string(b))}
			second.Dir = filepath.Join(data2, "pods/run", second.UUID)
			ownPod(second.UUID)
			if st, _, _ := pod1(t, data2, "status", second.UUID); !strings.Contains(st, "app-probe=-1") && strings.Contains(st, "app-probe=") {
				t.Errorf("the refused pod's app ran: %q", st)
			}
			if left := netLeftovers(t, second); len(left) != 0 {
				t.Errorf("left of the refused pod: %v", left)
			}
			if got := dialTCP(t, "127.0.0.1:"+itoa(hp), "first"); got != "pong first" {
				t.Errorf("the first pod's port: %q", got)
			}
			if c := first.wait(t); c != 0 {
				t.Fatalf("first pod exited %d: %s", c, first.Stderr)
			}
			if where == "same-dir" {
				third := runBG(t, data, "--net=default", "--port=http:"+itoa(hp2), img, "--exec=/bin/probe", "--", "serve", "0.0.0.0:8080", "1")
				if got := dialTCP(t, "127.0.0.1:"+itoa(hp2), "third"); got != "pong third" {
					t.Errorf("a port only the first pod's record claims: %q", got)
				}
				if c := third.wait(t); c != 0 {
					t.Fatalf("third pod exited %d: %s", c, third.Stderr)
				}
			}
		})
	}
}

// rewritePorts replaces the host ports a pod's net-info.json records with
// hostPort, as a hostile pod could.
func rewritePorts(t *testing.T, podDir string, hostPort int) {
	t.Helper()
	f := filepath.Join(podDir, "net-info.json")
	b, err := os.ReadFile(f)
	must(t, err)
	var nis []map[string]any
	must(t, json.Unmarshal(b, &nis))
	for _, ni := range nis {
		ni["portMappings"] = []map[string]any{{"hostPort": hostPort, "containerPort": 8080, "protocol": "tcp"}}
	}
	b, err = json.Marshal(nis)
	must(t, err)
	must(t, os.WriteFile(f, b, 0o644))
}

// rkt run --port with a host port that a running pod forwards is
// refused the same way.
func TestRktNetPortTaken(t *testing.T) {
	r := newRkt(t)
	hp := freePort(t)
	ports := []map[string]any{{"name": "http", "protocol": "tcp", "port": 8080}}
	web := r.aci("web", map[string]any{"exec": []string{"/bin/probe", "serve", "0.0.0.0:8080", "1"}, "ports": ports}, nil)
	quick := r.aci("quick", map[string]any{"exec": []string{"/bin/probe", "exit", "0"}, "ports": ports}, nil)
	first := r.start("run", "--net=default", "--port=http:"+itoa(hp), web)
	uf := filepath.Join(r.dir, "uuid-second")
	_, errOut, code := r.run("--uuid-file-save="+uf, "--net=default", "--port=http:"+itoa(hp), quick)
	refusedLine(t, code, errOut, hp, first.UUID)
	b, err := os.ReadFile(uf)
	must(t, err)
	second := &Pod{UUID: strings.TrimSpace(string(b))}
	second.Dir = filepath.Join(r.data, "pods/run", second.UUID)
	ownPod(second.UUID)
	if left := netLeftovers(t, second); len(left) != 0 {
		t.Errorf("left of the refused pod: %v", left)
	}
	if got := dialTCP(t, "127.0.0.1:"+itoa(hp), "first"); got != "pong first" {
		t.Errorf("the first pod's port: %q", got)
	}
	if c := first.wait(t); c != 0 {
		t.Fatalf("first pod exited %d: %s", c, first.errb)
	}
}

// A pod that ended (stopped, its stage1 SIGKILLed, its PID 1 killed)
// does not hold its host port until gc: the next pod1 run on the port is
// served at once, also when the ended pod waits out gc's grace period in
// exited-garbage, and from another data directory (where the ended pod is
// judged by its network namespace). gc of the ended pod afterwards leaves
// the new pod's forward alone, and gc of both leaves nothing.
func TestNetPortReusedPod1Run(t *testing.T) {
	for _, how := range []string{"stop", "kill-run", "kill-pid1", "stop-gc-marked", "stop-other-dir"} {
		t.Run(how, func(t *testing.T) {
			img := probeACIWithPort(t)
			data := dataDir(t)
			gcAtEnd(t, data)
			data2 := data
			if how == "stop-other-dir" {
				data2 = dataDir(t)
				gcAtEnd(t, data2)
			}
			hp := freePort(t)
			addr := "127.0.0.1:" + itoa(hp)
			first := runBG(t, data, "--net=default", "--port=http:"+itoa(hp), img, "--exec=/bin/probe", "--", "serve", "0.0.0.0:8080", "100")
			pid := first.waitPid(t)
			if got := dialTCP(t, addr, "first"); got != "pong first" {
				t.Fatalf("the first pod's port: %q", got)
			}
			switch how {
			case "kill-run":
				must(t, first.Cmd.Process.Signal(syscall.SIGKILL)) // pod1 run became the stage1's run
			case "kill-pid1":
				must(t, syscall.Kill(pid, syscall.SIGKILL))
			default:
				if _, errOut, code := pod1(t, data, "stop", first.UUID); code != 0 {
					t.Fatalf("pod1 stop: %d %s", code, errOut)
				}
			}
			first.wait(t)
			waitFor(t, 10*time.Second, "the first pod exited", func() bool {
				out, _, _ := pod1(t, data, "status", first.UUID)
				return strings.HasPrefix(out, "state=exited\n")
			})
			firstPod := &Pod{UUID: first.UUID, Dir: first.Dir}
			if how == "stop-gc-marked" {
				if _, errOut, code := pod1(t, data, "gc"); code != 0 {
					t.Fatalf("gc: %d %s", code, errOut)
				}
				firstPod.Dir = filepath.Join(data, "pods/exited-garbage", first.UUID)
				if _, err := os.Stat(firstPod.Dir); err != nil {
					t.Fatalf("the first pod is not in exited-garbage: %v", err)
				}
			}
			if left := strings.Join(netLeftovers(t, firstPod), "\n"); !strings.Contains(left, "dnat name") {
				t.Fatalf("the ended pod's forward is gone before the next pod: the test would prove nothing\n%s", left)
			}
			second := runBG(t, data2, "--net=default", "--port=http:"+itoa(hp), img, "--exec=/bin/probe", "--", "serve", "0.0.0.0:8080", "2")
			if got := dialTCP(t, addr, "second"); got != "pong second" {
				t.Errorf("the port after the first pod ended: %q", got)
			}
			if _, errOut, code := pod1(t, data, "gc", "--grace-period=0s"); code != 0 {
				t.Fatalf("gc of the first pod: %d %s", code, errOut)
			}
			if left := netLeftovers(t, firstPod); len(left) != 0 {
				t.Errorf("left of the first pod after its gc: %v", left)
			}
			if got := dialTCP(t, addr, "after-gc"); got != "pong after-gc" {
				t.Errorf("the port after the first pod's gc: %q", got)
			}
			if c := second.wait(t); c != 0 {
				t.Fatalf("second pod exited %d: %s", c, second.Stderr)
			}
			if _, errOut, code := pod1(t, data2, "gc", "--grace-period=0s"); code != 0 {
				t.Fatalf("gc: %d %s", code, errOut)
			}
			if left := netLeftovers(t, &Pod{UUID: second.UUID, Dir: second.Dir}); len(left) != 0 {
				t.Errorf("left of the second pod after gc: %v", left)
			}
		})
	}
}

// rkt stop, then rkt run of the same image on the same --port: the new
// pod is served at once, not after rkt gc's grace period.
func TestRktNetPortReusedAfterStop(t *testing.T) {
	r := newRkt(t)
	hp := freePort(t)
	addr := "127.0.0.1:" + itoa(hp)
	web := r.aci("web", map[string]any{
		"exec":  []string{"/bin/probe", "serve", "0.0.0.0:8080", "100"},
		"ports": []map[string]any{{"name": "http", "protocol": "tcp", "port": 8080}},
	}, nil)
	first := r.start("run", "--net=default", "--port=http:"+itoa(hp), web)
	if got := dialTCP(t, addr, "first"); got != "pong first" {
		t.Fatalf("the first pod's port: %q", got)
	}
	r.rkt("stop", first.UUID)
	first.wait(t)
	second := r.start("run", "--net=default", "--port=http:"+itoa(hp), web)
	if got := dialTCP(t, addr, "second"); got != "pong second" {
		t.Errorf("the port after rkt stop: %q", got)
	}
	r.rkt("stop", second.UUID)
	second.wait(t)
	if _, errOut, code := r.exec(rktTimeout, nil, "gc", "--grace-period=0s"); code != 0 {
		t.Fatalf("rkt gc: %d %s", code, errOut)
	}
	for _, p := range []*rktPod{first, second} {
		if left := netLeftovers(t, &Pod{UUID: p.UUID, Dir: filepath.Join(r.data, "pods/run", p.UUID)}); len(left) != 0 {
			t.Errorf("left of pod %s after rkt gc: %v", p.UUID, left)
		}
	}
}

// Pods started at once on one host port: one gets it, the others are
// refused naming it. The look at the host's forwards and portmap's ADD
// are one step under a host-wide lock; without it two pods can both
// find the port free and both forward it.
func TestNetPortRacePod1Run(t *testing.T) {
	img := probeACIWithPort(t)
	data := dataDir(t)
	gcAtEnd(t, data)
	hp := freePort(t)
	pods := make([]*bgPod, 3)
	for i := range pods {
		pods[i] = runBG(t, data, "--net=default", "--port=http:"+itoa(hp), img, "--exec=/bin/probe", "--", "serve", "0.0.0.0:8080", "1")
	}
	exited := func(p *bgPod) bool {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}
	waitFor(t, 30*time.Second, "every pod running or refused", func() bool {
		for _, p := range pods {
			if _, err := os.Stat(filepath.Join(p.Dir, layout.Pid)); err != nil && !exited(p) {
				return false
			}
		}
		return true
	})
	var winners, losers []*bgPod
	for _, p := range pods {
		if exited(p) {
			losers = append(losers, p)
		} else {
			winners = append(winners, p)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d pods got host port %d, want 1", len(winners), hp)
	}
	for _, p := range losers {
		refusedLine(t, p.Code, p.Stderr.String(), hp, winners[0].UUID)
	}
	if got := dialTCP(t, "127.0.0.1:"+itoa(hp), "race"); got != "pong race" {
		t.Errorf("the port: %q", got)
	}
	if c := winners[0].wait(t); c != 0 {
		t.Fatalf("the pod that got the port exited %d: %s", c, winners[0].Stderr)
	}
}
