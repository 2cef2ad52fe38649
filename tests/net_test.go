package tests

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
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

// A forwarded host port (rkt run --port=http:HOSTPORT) reaches the app
// from the host's own address and from 127.0.0.1; gc removes the forward.
func TestNetPortForward(t *testing.T) {
	addr := hostAddr(t)
	hp := freePort(t)
	apps := []App{{Name: "web", Exec: probe("serve", "0.0.0.0:8080", "2")}}
	p := newPodRaw(t, withPorts(t, manifest(apps, nil), map[string]map[string]int{"web": {"http": 8080}}, map[string]int{"http": hp}), apps)
	withNetworking(t, p)
	r := start(t, p, RunOpts{Args: []string{"--net=default"}})
	nis := waitNetInfo(t, p.Dir, 1)
	if len(nis[0].Ports) != 1 || nis[0].Ports[0].HostPort != hp || nis[0].Ports[0].ContainerPort != 8080 {
		t.Fatalf("net-info.json ports: %+v", nis[0].Ports)
	}
	if got := dialTCP(t, "127.0.0.1:"+itoa(hp), "via-localhost"); got != "pong via-localhost" {
		t.Errorf("127.0.0.1:%d: %q", hp, got)
	}
	if addr != "" {
		if got := dialTCP(t, addr+":"+itoa(hp), "via-host-addr"); got != "pong via-host-addr" {
			t.Errorf("%s:%d: %q", addr, hp, got)
		}
	} else {
		t.Log("no host address outside 172.16/12: only 127.0.0.1 tested")
		dialTCP(t, nis[0].IP.String()+":8080", "direct")
	}
	if code := r.Wait(t); code != 0 {
		t.Fatalf("pod exited %d: %s %s", code, r.Stdout, r.Stderr)
	}
	before := strings.Join(netLeftovers(t, p), "\n")
	if !strings.Contains(before, "DNAT") {
		t.Errorf("no DNAT rule naming the pod before gc:\n%s", before)
	}
	gcPod(t, p)
	if left := netLeftovers(t, p); len(left) != 0 {
		t.Errorf("left after gc: %v", left)
	}
}

// Bad network input fails the pod with 254 and one line naming the
// network and the cause, before any app starts, and leaves nothing.
func TestNetBadInput(t *testing.T) {
	cases := []struct {
		name  string
		net   string
		confs map[string]string
		want  string
	}{
		{"unknown", "nosuchnet", nil, `network "nosuchnet": no such network`},
		{"unparsable", "default", map[string]string{"10-bad.conf": `{"name": "bad", "type":`}, "10-bad.conf"},
		{"missing-plugin", "noplug", map[string]string{"10-noplug.conf": `{"cniVersion":"0.3.1","name":"noplug","type":"nosuchplugin"}`}, `network "noplug": plugin "nosuchplugin" not found`},
		{"bad-type", "slash", map[string]string{"10-slash.conf": `{"cniVersion":"0.3.1","name":"slash","type":"../../bin/sh"}`}, `plugin type "../../bin/sh" is not a plain name`},
		// Refused by run before anything starts, not by net-setup.
		{"bad-args", "default:IP", nil, `--net: network "default": argument "IP" is not K=V`},
		{"ip-outside-range", "default:IP=10.99.99.99", nil, `network "default"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
			withNetworking(t, p)
			args := []string{"--net=" + c.net}
			if c.confs != nil {
				args = append(args, "--local-config="+localConfig(t, c.confs))
			}
			r := runPod(t, p, RunOpts{Args: args})
			lines := strings.Split(strings.TrimSpace(r.Stderr.String()), "\n")
			prefix := "stage1: failed to setup network: "
			if strings.HasPrefix(c.want, "--net:") {
				prefix = "stage1: "
			}
			if r.Code != 254 || len(lines) != 1 || !strings.HasPrefix(lines[0], prefix) || !strings.Contains(lines[0], c.want) {
				t.Errorf("exit %d, stderr %q; want 254 and one line with %q", r.Code, r.Stderr, c.want)
			}
			if code := p.Status(t, "a"); code != -1 {
				t.Errorf("the app ran (status %d)", code)
			}
			if left := netLeftovers(t, p); len(left) != 0 {
				t.Errorf("left: %v", left)
			}
		})
	}
}

// An address already taken fails the second pod, and its other network,
// set up before, is undone: nothing of the failed pod is left.
func TestNetIPTaken(t *testing.T) {
	conf := map[string]string{"20-taken.conf": `{"cniVersion":"0.3.1","name":"taken","type":"ptp",
		"ipam":{"type":"host-local","subnet":"10.213.77.0/24","dataDir":"/run/pod1-test-cni"}}`}
	lc := localConfig(t, conf)
	first := newPod(t, []App{{Name: "a", Exec: probe("sleep", "30s")}}, nil)
	withNetworking(t, first)
	r1 := start(t, first, RunOpts{Args: []string{"--net=taken:IP=10.213.77.9", "--local-config=" + lc}})
	waitNetInfo(t, first.Dir, 1)
	p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
	withNetworking(t, p)
	r := runPod(t, p, RunOpts{Args: []string{"--net=default,taken:IP=10.213.77.9", "--local-config=" + lc}})
	// rkt's words, which rkt's TestNetIPConflict looks for.
	if r.Code != 254 || !strings.Contains(r.Stderr.String(), `stage1: failed to setup network: requested IP address "10.213.77.9" is not available in network: taken`) ||
		strings.Count(strings.TrimSpace(r.Stderr.String()), "\n") != 0 {
		t.Errorf("exit %d, stderr %q", r.Code, r.Stderr)
	}
	if left := netLeftovers(t, p); len(left) != 0 {
		t.Errorf("left of the failed pod: %v", left)
	}
	r1.cancel()
	r1.Wait(t)
	gcPod(t, first)
	if left := netLeftovers(t, first); len(left) != 0 {
		t.Errorf("left of the first pod: %v", left)
	}
}

// run SIGKILLed at each step of the network setup (net-setup and PID 1
// die with it), then gc: nothing of the network is left.
func TestNetKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"bound", "recorded:default", "added:default", "ports:default", "done"} {
		t.Run(step, func(t *testing.T) {
			apps := []App{{Name: "web", Exec: probe("exit", "0")}}
			p := newPodRaw(t, withPorts(t, manifest(apps, nil), map[string]map[string]int{"web": {"http": 8080}}, map[string]int{"http": freePort(t)}), apps)
			withNetworking(t, p)
			r := runPod(t, p, RunOpts{Args: []string{"--net=default"}, Env: []string{"POD1_TEST_NET_KILL_AT=" + step}})
			if r.Code != 128+9 {
				t.Fatalf("run was not killed at %s: exit %d %s", step, r.Code, r.Stderr)
			}
			if code := p.Status(t, "web"); code != -1 {
				t.Errorf("the app ran (status %d)", code)
			}
			before := netLeftovers(t, p)
			if len(before) == 0 {
				t.Fatal("nothing to clean up: the test would prove nothing")
			}
			if step != "bound" && step != "recorded:default" && !strings.Contains(strings.Join(before, "\n"), "MASQUERADE") {
				t.Errorf("no masquerade rule before gc: %v", before)
			}
			gcPod(t, p)
			if left := netLeftovers(t, p); len(left) != 0 {
				t.Errorf("left after gc (had %v): %v", before, left)
			}
		})
	}
}

// pod1 run --net=default --port=http:HOSTPORT: the port forwards to the
// app, pod1 status and list show the pod's address, pod1 gc leaves
// nothing of its network.
func TestNetPod1RunStatusPortGC(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	mf := filepath.Join(img, "manifest")
	var m map[string]any
	b, err := os.ReadFile(mf)
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	m["app"].(map[string]any)["ports"] = []map[string]any{{"name": "http", "protocol": "tcp", "port": 8080}}
	b, _ = json.Marshal(m)
	must(t, os.WriteFile(mf, b, 0o644))
	hp := freePort(t)
	// Registered before the pod: runs after it has stopped.
	t.Cleanup(func() { pod1(t, data, "gc", "--grace-period=0s") })
	p := runBG(t, data, "--net=default", "--port=http:"+itoa(hp), img, "--exec=/bin/probe", "--", "serve", "0.0.0.0:8080", "1")
	nis := waitNetInfo(t, p.Dir, 1)
	out, _, code := pod1(t, data, "status", p.UUID)
	if code != 0 || !strings.Contains(out, "\nnetworks=default:ip4="+nis[0].IP.String()+"\n") {
		t.Errorf("pod1 status: %d %q", code, out)
	}
	out, _, _ = pod1(t, data, "list", "--no-legend")
	if !strings.Contains(out, "default:ip4="+nis[0].IP.String()) {
		t.Errorf("pod1 list: %q", out)
	}
	if got := dialTCP(t, "127.0.0.1:"+itoa(hp), "hi"); got != "pong hi" {
		t.Errorf("forwarded port: %q", got)
	}
	if c := p.wait(t); c != 0 {
		t.Fatalf("pod exited %d: %s", c, p.Stderr)
	}
	// rkt shows an exited pod's networks too: they last until gc.
	if out, _, _ := pod1(t, data, "status", p.UUID); !strings.Contains(out, "\nnetworks=default:ip4="+nis[0].IP.String()+"\n") {
		t.Errorf("pod1 status of the exited pod: %q", out)
	}
	pod := &Pod{Dir: p.Dir, UUID: p.UUID}
	if left := netLeftovers(t, pod); len(left) == 0 {
		t.Fatal("nothing before gc: the test would prove nothing")
	}
	if _, errOut, code := pod1(t, data, "gc", "--grace-period=0s"); code != 0 {
		t.Fatalf("gc: %d %s", code, errOut)
	}
	if left := netLeftovers(t, pod); len(left) != 0 {
		t.Errorf("left after pod1 gc: %v", left)
	}
}

// pod1 run --dns*: stage0 writes the apps' resolv.conf, as rkt run does;
// a bad combination is refused before anything starts.
func TestNetPod1RunDNSFlags(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	p := runBG(t, data, "--dns=10.213.87.53", "--dns-search=pod1.test", "--dns-opt=ndots:2", "--dns-domain=d.test",
		img, "--exec=/bin/probe", "--", "cat", "/etc/resolv.conf")
	if c := p.wait(t); c != 0 {
		t.Fatalf("pod exited %d: %s", c, p.Stderr)
	}
	for _, want := range []string{"cat nameserver 10.213.87.53\n", "cat search pod1.test\n", "cat options ndots:2\n", "cat domain d.test\n"} {
		if !strings.Contains(p.Stdout.String(), want) {
			t.Errorf("resolv.conf has no %q:\n%s", want, p.Stdout)
		}
	}
	code, out := pod1cli(t, nil, "run", "--dir="+data, "--stage1-path="+stage1ACI(t), "--net=none", "--dns=host", "--dns=10.1.1.1", img)
	if code != 254 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "--dns=host cannot be combined") {
		t.Errorf("--dns=host --dns=10.1.1.1: %d %q", code, out)
	}
}

// gc reads only what it validates: a netns that is the host's (a planted
// symlink to it, or a bind mount of it) is not handed to the plugins, so
// their DEL of "eth7" does not delete the host's eth7; a recorded
// pluginPath is never run.
func TestNetGCPlanted(t *testing.T) {
	for _, kind := range []string{"symlink", "bind"} {
		t.Run(kind, func(t *testing.T) {
			bait := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth7"}}
			if _, err := netlink.LinkByName("eth7"); err == nil {
				t.Skip("this host has an eth7 of its own")
			}
			must(t, netlink.LinkAdd(bait))
			t.Cleanup(func() { _ = netlink.LinkDel(bait) })
			p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
			withNetworking(t, p)
			marker := filepath.Join(t.TempDir(), "ran")
			evil := filepath.Join(t.TempDir(), "evil")
			must(t, os.WriteFile(evil, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755))
			must(t, os.MkdirAll(filepath.Join(p.Dir, "net"), 0o700))
			b, err := os.ReadFile(filepath.Join(repoRoot, "rootfs/net.d/99-default.conf"))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(p.Dir, "net/default.conf"), b, 0o600))
			must(t, os.WriteFile(filepath.Join(p.Dir, "net-info.json"), []byte(`[{"netName":"default","netConf":"net/default.conf","pluginPath":"`+evil+`","ifName":"eth7","ip":"172.16.28.250","args":"","mask":"255.255.255.0"}]`), 0o644))
			ns := filepath.Join(p.Dir, "netns")
			if kind == "symlink" {
				must(t, os.Symlink("/proc/self/ns/net", ns))
			} else {
				must(t, os.WriteFile(ns, nil, 0o444))
				must(t, unix.Mount("/proc/self/ns/net", ns, "", unix.MS_BIND, ""))
				t.Cleanup(func() { _ = unix.Unmount(ns, unix.MNT_DETACH) })
			}
			gcPod(t, p)
			if _, err := netlink.LinkByName("eth7"); err != nil {
				t.Errorf("gc deleted the host's eth7: %v", err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("gc ran the recorded pluginPath")
			}
		})
	}
}

// A DEL that fails (the network's plugin gone by gc time) fails gc and
// keeps the network's entry for a retry, but the namespace's bind mount
// under /var/run/netns goes, and the pod's interfaces with it: rkt
// deletes the pod whatever its stage1's gc says, and the mount would
// outlive it. The retry, with the plugin back, frees the lease and the
// records; ptp finds the masquerade rule it made only through the
// namespace's interface, so that rule is what a failed DEL leaves
// (docs/networking.md).
func TestNetGCDelFails(t *testing.T) {
	lc := localConfig(t, map[string]string{"30-flaky.conf": `{"cniVersion":"0.3.1","name":"flaky","type":"flaky-ptp","ipMasq":true,"ipam":` +
		ipamConf(testSubnet(), "/run/pod1-test-cni") + `}`})
	plugin := filepath.Join(lc, "net.d", "flaky-ptp")
	b, err := os.ReadFile(filepath.Join(repoRoot, "build/stage1/rootfs/usr/lib/rkt/plugins/net/ptp"))
	must(t, err)
	must(t, os.WriteFile(plugin, b, 0o755))
	p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
	withNetworking(t, p)
	if r := runPod(t, p, RunOpts{Args: []string{"--net=flaky", "--local-config=" + lc}}); r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	ip := waitNetInfo(t, p.Dir, 1)[0].IP
	veth := hostLink(t, ip)
	must(t, os.Rename(plugin, plugin+".away"))
	gc := exec.Command(filepath.Join(p.Dir, "stage1/rootfs/gc"), "--local-config", lc, p.UUID)
	gc.Dir = p.Dir
	if out, err := gc.CombinedOutput(); err == nil || !strings.Contains(string(out), `network "flaky"`) {
		t.Fatalf("gc with the plugin gone: %v %s; want a failure naming the network", err, out)
	}
	left := strings.Join(netLeftovers(t, p, veth), "\n")
	if strings.Contains(left, "netns") {
		t.Errorf("the namespace's mount or record is left after a failed DEL:\n%s", left)
	}
	for _, want := range []string{"file " + layout.NetInfo, "MASQUERADE"} {
		if !strings.Contains(left, want) {
			t.Errorf("no %q kept for the retry:\n%s", want, left)
		}
	}
	// The kernel frees a namespace, and the veth with it, in a work
	// queue of its own after the last reference goes: on a loaded host
	// that is later than gc's return.
	waitFor(t, eventDeadline, "the pod's veth gone with its namespace", func() bool {
		return !strings.Contains(strings.Join(netLeftovers(t, p, veth), "\n"), "link "+veth)
	})
	must(t, os.Rename(plugin+".away", plugin))
	gcPod(t, p, "--local-config", lc)
	for _, l := range netLeftovers(t, p, veth) {
		if !strings.HasPrefix(l, "iptables-save: ") && !strings.HasPrefix(l, "nft rule") {
			t.Errorf("left after the retry: %s", l)
		}
	}
	cleanRulesOf(t, p.UUID)
}

// cleanRulesOf deletes the iptables rules and chains whose comment names
// the pod, which a failed DEL leaves.
func cleanRulesOf(t *testing.T, uuid string) {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return
	}
	var chains []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "-A ") || !strings.Contains(l, uuid) {
			continue
		}
		f := strings.Fields(l)
		if c := f[len(f)-1]; strings.HasPrefix(c, "CNI-") {
			chains = append(chains, c)
		}
		// iptables-save quotes as the shell does; iptables takes its args unquoted.
		if err := exec.Command("sh", "-c", "iptables -t nat -D "+strings.TrimPrefix(l, "-A ")).Run(); err != nil {
			t.Logf("delete %s: %v", l, err)
		}
	}
	for _, c := range chains {
		_ = exec.Command("iptables", "-t", "nat", "-F", c).Run()
		_ = exec.Command("iptables", "-t", "nat", "-X", c).Run()
	}
}

// --mds-token on a CNI network: the apps reach rkt's metadata service at
// their network's gateway (the host's address on it), as with rkt's stage1.
func TestNetMetadataURL(t *testing.T) {
	p := newPod(t, []App{{Name: "web", Exec: probe("env")}}, nil)
	withNetworking(t, p)
	r := runPod(t, p, RunOpts{Args: []string{"--net=default", "--mds-token=0123abcd"}})
	if r.Code != 0 || !strings.Contains(r.Stdout.String(), `env "AC_METADATA_URL=http://172.16.28.1:18112/0123abcd"`) {
		t.Fatalf("exit %d, AC_METADATA_URL missing:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	gcPod(t, p)
}
