package tests

import (
	"regexp"
	"strings"
	"testing"
)

// rkt run --net=default --port: the pod has an address rkt status and
// list show, the host port reaches the app from 127.0.0.1, and rkt gc
// leaves nothing of the network.
func TestRktNetDefaultPortGC(t *testing.T) {
	r := newRkt(t)
	hp := freePort(t)
	img := r.aci("web", map[string]any{
		"exec":  []string{"/bin/probe", "serve", "0.0.0.0:8080", "1"},
		"ports": []map[string]any{{"name": "http", "protocol": "tcp", "port": 8080}},
	}, nil)
	p := r.start("run", "--net=default", "--port=http:"+itoa(hp), img)
	re := regexp.MustCompile(`(?m)^networks=default:ip4=(172\.16\.28\.\d+)$`)
	var ip string
	waitFor(t, rktTimeout, "rkt status showing the address", func() bool {
		out, _, _ := r.exec(rktTimeout, nil, "status", p.UUID)
		if m := re.FindStringSubmatch(out); m != nil {
			ip = m[1]
			return true
		}
		return false
	})
	if list := r.rkt("list", "--full", "--no-legend"); !strings.Contains(list, "default:ip4="+ip) {
		t.Errorf("rkt list: %q", list)
	}
	if got := dialTCP(t, "127.0.0.1:"+itoa(hp), "via-rkt"); got != "pong via-rkt" {
		t.Errorf("forwarded port: %q", got)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("rkt run exited %d: %s", code, p.errb)
	}
	pod := &Pod{UUID: p.UUID, Dir: r.data + "/pods/run/" + p.UUID}
	if len(netLeftovers(t, pod)) == 0 {
		t.Fatal("nothing before gc: the test would prove nothing")
	}
	if _, errOut, code := r.exec(rktTimeout, nil, "gc", "--grace-period=0s"); code != 0 {
		t.Fatalf("rkt gc: %d %s", code, errOut)
	}
	if left := netLeftovers(t, pod); len(left) != 0 {
		t.Errorf("left after rkt gc: %v", left)
	}
}

// rkt run with an unknown network fails with rkt's line and 254, before
// the app runs; rkt --dns writes the app's resolv.conf through stage0.
func TestRktNetBadNameAndDNS(t *testing.T) {
	r := newRkt(t)
	img := r.aci("dns", map[string]any{"exec": []string{"/bin/probe", "cat", "/etc/resolv.conf"}}, nil)
	out, errOut, code := r.run("--net=nosuchnet", img)
	if code != 254 || !strings.Contains(errOut, `stage1: failed to setup network: network "nosuchnet": no such network`) || strings.Contains(out, "cat ") {
		t.Errorf("--net=nosuchnet: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	out, errOut, code = r.run("--dns=10.213.88.53", "--dns-search=rkt.test", img)
	if code != 0 || !hasLine(out, "^cat nameserver 10.213.88.53$") || !hasLine(out, "^cat search rkt.test$") {
		t.Errorf("--dns: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
