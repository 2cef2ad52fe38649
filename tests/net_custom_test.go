package tests

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// testLinkName is a host link name of this test run's own.
func testLinkName(prefix string) string { return fmt.Sprintf("%s%05d", prefix, rand.IntN(100000)) }

// twoPodsTalk starts a server pod and a client pod on the network conf
// (a user configuration) and checks the client gets the server's answer
// over the network; then gc leaves nothing of either pod's network.
func twoPodsTalk(t *testing.T, conf string, links ...string) {
	t.Helper()
	lc := localConfig(t, map[string]string{"30-test.conf": conf})
	srv := newPod(t, []App{{Name: "srv", Exec: probe("serve", "0.0.0.0:7070", "1")}}, nil)
	withNetworking(t, srv)
	rs := start(t, srv, RunOpts{Args: []string{"--net=ptest", "--local-config=" + lc}})
	sip := waitNetInfo(t, srv.Dir, 1)[0].IP
	cli := newPod(t, []App{{Name: "cli", Exec: probe("dial", sip.String()+":7070", "hello-peer")}}, nil)
	withNetworking(t, cli)
	rc := runPod(t, cli, RunOpts{Args: []string{"--net=ptest", "--local-config=" + lc}})
	if rc.Code != 0 || rc.Line(t, "dial") != "dial "+sip.String()+":7070 reply pong hello-peer" {
		t.Errorf("client: exit %d, %q %s", rc.Code, rc.Stdout, rc.Stderr)
	}
	if code := rs.Wait(t); code != 0 {
		t.Errorf("server exited %d: %s", code, rs.Stderr)
	}
	for _, p := range []*Pod{srv, cli} {
		if len(netLeftovers(t, p)) == 0 {
			t.Fatal("nothing before gc: the test would prove nothing")
		}
		gcPod(t, p, "--local-config", lc)
		if left := netLeftovers(t, p, links...); len(left) != 0 {
			t.Errorf("left after gc: %v", left)
		}
	}
}

// testSubnet is a /24 of this test run's own (other suites may run the
// same tests at the same time on this machine).
func testSubnet() string { return fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(50), rand.IntN(256)) }

func ipamConf(subnet, dataDir string) string {
	return fmt.Sprintf(`{"type":"host-local","subnet":%q,"dataDir":%q}`, subnet, dataDir)
}

// Two pods on one bridge network talk to each other.
func TestNetBridgeTwoPods(t *testing.T) {
	br := testLinkName("p1tbr")
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(br); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	twoPodsTalk(t, fmt.Sprintf(`{"cniVersion":"0.3.1","name":"ptest","type":"bridge","bridge":%q,"isGateway":true,"ipam":%s}`,
		br, ipamConf(testSubnet(), t.TempDir())))
}

// parentLink makes a link, up, for macvlan and ipvlan networks to sit
// on: a dummy, or a bridge with no ports where the kernel has no dummy
// driver.
func parentLink(t *testing.T) netlink.Link {
	t.Helper()
	name := testLinkName("p1tpa")
	var l netlink.Link = &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := netlink.LinkAdd(l); errors.Is(err, unix.EOPNOTSUPP) {
		l = &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		must(t, netlink.LinkAdd(l))
	} else {
		must(t, err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(l) })
	must(t, netlink.LinkSetUp(l))
	l, err := netlink.LinkByName(name)
	must(t, err)
	return l
}

// Two pods on a macvlan network (bridge mode, on a parent link of the
// test's own) talk.
func TestNetMacvlanTwoPods(t *testing.T) {
	parent := parentLink(t).Attrs().Name
	twoPodsTalk(t, fmt.Sprintf(`{"cniVersion":"0.3.1","name":"ptest","type":"macvlan","master":%q,"mode":"bridge","ipam":%s}`,
		parent, ipamConf(testSubnet(), t.TempDir())))
}

// Two pods on an ipvlan network (l2, on a parent link of the test's own)
// talk.
func TestNetIpvlanTwoPods(t *testing.T) {
	pl := parentLink(t)
	probeLink := &netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: testLinkName("p1tiv"), ParentIndex: pl.Attrs().Index}, Mode: netlink.IPVLAN_MODE_L2}
	if err := netlink.LinkAdd(probeLink); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skip("this kernel has no ipvlan (CONFIG_IPVLAN)")
	} else {
		must(t, err)
		_ = netlink.LinkDel(probeLink)
	}
	parent := pl.Attrs().Name
	twoPodsTalk(t, fmt.Sprintf(`{"cniVersion":"0.3.1","name":"ptest","type":"ipvlan","master":%q,"mode":"l2","ipam":%s}`,
		parent, ipamConf(testSubnet(), t.TempDir())))
}

// Two pods on a custom ptp network talk through the host.
func TestNetPtpTwoPods(t *testing.T) {
	twoPodsTalk(t, fmt.Sprintf(`{"cniVersion":"0.3.1","name":"ptest","type":"ptp","ipam":%s}`,
		ipamConf(testSubnet(), t.TempDir())))
}

// default-restricted: the pod is reached from the host, but has no route
// out of its network.
func TestNetDefaultRestricted(t *testing.T) {
	addr := hostAddr(t)
	if addr == "" {
		addr = "10.213.85.1" // not routed to from the pod either way
	}
	p := newPod(t, []App{{Name: "a", Exec: probe("serve", "0.0.0.0:7070", "1", "+", "dial", addr+":22", "x")}}, nil)
	withNetworking(t, p)
	r := start(t, p, RunOpts{Args: []string{"--net=default-restricted"}})
	ni := waitNetInfo(t, p.Dir, 1)[0]
	if !strings.HasPrefix(ni.IP.String(), "172.31.") {
		t.Errorf("default-restricted address %s, want 172.31.0.0/16", ni.IP)
	}
	if got := dialTCP(t, ni.IP.String()+":7070", "in"); got != "pong in" {
		t.Errorf("host to pod: %q", got)
	}
	if code := r.Wait(t); code != 0 {
		t.Fatalf("exit %d: %s", code, r.Stderr)
	}
	if got := r.Line(t, "dial"); !strings.Contains(got, "network is unreachable") {
		t.Errorf("pod to %s: %q, want unreachable", addr, got)
	}
	gcPod(t, p)
	if left := netLeftovers(t, p); len(left) != 0 {
		t.Errorf("left after gc: %v", left)
	}
}

// A network's DNS answer becomes the apps' resolv.conf (resolv=default);
// --dns-conf-mode=resolv=host keeps the host's.
func TestNetDNSFromPlugin(t *testing.T) {
	lc := localConfig(t, map[string]string{"30-dns.conf": fmt.Sprintf(`{"cniVersion":"0.3.1","name":"pdns","type":"ptp",
		"dns":{"nameservers":["10.213.86.53"],"search":["pod1.test"]},"ipam":%s}`, ipamConf(testSubnet(), t.TempDir()))})
	for _, mode := range []string{"", "resolv=host,hosts=default"} {
		t.Run("mode="+mode, func(t *testing.T) {
			p := newPod(t, []App{{Name: "a", Exec: probe("cat", "/etc/resolv.conf")}}, nil)
			withNetworking(t, p)
			args := []string{"--net=pdns", "--local-config=" + lc}
			if mode != "" {
				args = append(args, "--dns-conf-mode="+mode)
			}
			r := runPod(t, p, RunOpts{Args: args})
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			out := strings.Join(r.Lines("cat"), "\n")
			has := strings.Contains(out, "nameserver 10.213.86.53") && strings.Contains(out, "search pod1.test")
			if has != (mode == "") {
				t.Errorf("resolv.conf (mode %q):\n%s", mode, out)
			}
			gcPod(t, p, "--local-config", lc)
			if left := netLeftovers(t, p); len(left) != 0 {
				t.Errorf("left after gc: %v", left)
			}
		})
	}
}
