package tests

import (
	"net"
	"strings"
	"testing"
)

// A pod on the default network has an address, is reached from the host
// at it, reaches the host, and after gc nothing of its network is left:
// no veth, no masquerade rule, no lease, no netns mount.
func TestNetDefaultTraffic(t *testing.T) {
	port, peer := hostListener(t, "0.0.0.0:0")
	p := newPod(t, []App{{Name: "srv", Exec: probe("addrs", "+", "serve", "0.0.0.0:7070", "+",
		"dial", "172.16.28.1:"+itoa(port), "hello-host")}}, nil)
	withNetworking(t, p)
	r := start(t, p, RunOpts{Args: []string{"--net=default"}})
	nis := waitNetInfo(t, p.Dir, 1)
	ni := nis[0]
	if ni.NetName != "default" || ni.IfName != "eth0" || !(&net.IPNet{IP: net.IPv4(172, 16, 28, 0), Mask: net.CIDRMask(24, 32)}).Contains(ni.IP) {
		t.Fatalf("net-info.json: %+v", nis)
	}
	veth := hostLink(t, ni.IP)
	if got := dialTCP(t, ni.IP.String()+":7070", "hello-pod"); got != "pong hello-pod" {
		t.Errorf("host to pod: %q", got)
	}
	if code := r.Wait(t); code != 0 {
		t.Fatalf("pod exited %d: %s %s", code, r.Stdout, r.Stderr)
	}
	if got := r.Line(t, "addrs eth0"); got != "addrs eth0 "+ni.IP.String()+"/24" {
		t.Errorf("pod's address: %q, net-info.json says %s", got, ni.IP)
	}
	if got := r.Line(t, "dial"); !strings.HasSuffix(got, "reply pong hello-host") {
		t.Errorf("pod to host: %q", got)
	}
	if got := <-peer; got != ni.IP.String() {
		t.Errorf("host saw the pod as %s, want %s", got, ni.IP)
	}
	// Until gc the namespace, the veth, the masquerade rule and the
	// lease outlive the pod, as in rkt: the check below can fail.
	before := strings.Join(netLeftovers(t, p, veth), "\n")
	for _, want := range []string{"netns mount", "link " + veth, "MASQUERADE", "cni file /var/lib/cni/networks/default/" + ni.IP.String()} {
		if !strings.Contains(before, want) {
			t.Errorf("before gc, no %q in:\n%s", want, before)
		}
	}
	gcPod(t, p)
	if left := netLeftovers(t, p, veth); len(left) != 0 {
		t.Errorf("left after gc: %v", left)
	}
	gcPod(t, p) // idempotent
}
