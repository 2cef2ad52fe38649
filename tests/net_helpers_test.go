package tests

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/network/netinfo"
)

// withNetworking gives a test pod's stage1 rootfs the built-in network
// configurations and plugins of the stage1 image (make image).
func withNetworking(t *testing.T, p *Pod) {
	t.Helper()
	img := filepath.Join(repoRoot, "build/stage1/rootfs")
	for _, d := range []string{"etc/rkt/net.d", "usr/lib/rkt/plugins/net"} {
		if _, err := os.Stat(filepath.Join(img, d)); err != nil {
			t.Fatalf("%s missing: run make image (%v)", d, err)
		}
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(p.Dir, "stage1/rootfs", d)), 0o755))
		must(t, os.Symlink(filepath.Join(img, d), filepath.Join(p.Dir, "stage1/rootfs", d)))
	}
	// After the stage1 has stopped (cleanups run last first): a test
	// that fails before its own gc leaves no network on the host.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
		defer cancel()
		gc := exec.CommandContext(ctx, filepath.Join(p.Dir, "stage1/rootfs/gc"), p.UUID)
		gc.Dir = p.Dir
		if out, err := gc.CombinedOutput(); err != nil {
			t.Errorf("gc entry point at cleanup: %v %s", err, out)
		}
	})
}

// localConfig makes a --local-config directory holding the given network
// configurations (file name -> JSON).
func localConfig(t *testing.T, confs map[string]string) string {
	t.Helper()
	d := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(d, "net.d"), 0o755))
	for name, c := range confs {
		must(t, os.WriteFile(filepath.Join(d, "net.d", name), []byte(c), 0o644))
	}
	return d
}

// waitNetInfo waits until every network of the pod has its address.
func waitNetInfo(t *testing.T, dir string, n int) []netinfo.NetInfo {
	t.Helper()
	var nis []netinfo.NetInfo
	waitFor(t, 20*time.Second, "net-info.json with addresses", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, layout.NetInfo))
		if err != nil || json.Unmarshal(b, &nis) != nil || len(nis) != n {
			return false
		}
		for _, ni := range nis {
			if ni.IP == nil {
				return false
			}
		}
		return true
	})
	return nis
}

// dialTCP connects to addr until it answers (the app may not listen yet),
// sends msg and returns the reply.
func dialTCP(t *testing.T, addr, msg string) string {
	t.Helper()
	var reply string
	waitFor(t, 15*time.Second, "an answer from "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte(msg + "\n"))
		b := make([]byte, 256)
		n, err := c.Read(b)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			return false
		}
		reply = strings.TrimSpace(string(b[:n]))
		return true
	})
	return reply
}

// hostListener answers one connection with "pong <msg>" and reports the
// peer's address on the returned channel.
func hostListener(t *testing.T, addr string) (port int, peer chan string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	must(t, err)
	t.Cleanup(func() { l.Close() })
	peer = make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 256)
		n, _ := c.Read(b)
		_, _ = c.Write([]byte("pong " + strings.TrimSpace(string(b[:n])) + "\n"))
		peer <- c.RemoteAddr().(*net.TCPAddr).IP.String()
	}()
	return l.Addr().(*net.TCPAddr).Port, peer
}

// hostVeth is the host-side link the kernel routes the pod's address
// through.
func hostLink(t *testing.T, ip net.IP) string {
	t.Helper()
	rs, err := netlink.RouteGet(ip)
	must(t, err)
	l, err := netlink.LinkByIndex(rs[0].LinkIndex)
	must(t, err)
	return l.Attrs().Name
}

// netLeftovers lists what of the pod's networking is still on the host:
// the netns mount and state files, iptables rules naming the pod, IPAM
// leases naming it, the given host links.
func netLeftovers(t *testing.T, p *Pod, links ...string) []string {
	t.Helper()
	var left []string
	for _, f := range []string{layout.NetInfo, layout.Netns, layout.NetDir} {
		if _, err := os.Lstat(filepath.Join(p.Dir, f)); err == nil {
			left = append(left, "file "+f)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	if strings.Contains(string(mi), filepath.Join(p.Dir, layout.Netns)) {
		left = append(left, "netns mount")
	}
	// /var/run is /run: mountinfo names the mount by the latter.
	nsPath := netinfo.NetnsPath(p.UUID)
	if strings.Contains(string(mi), strings.TrimPrefix(nsPath, "/var")) {
		left = append(left, "netns mount "+nsPath)
	}
	if _, err := os.Lstat(nsPath); err == nil {
		left = append(left, "file "+nsPath)
	}
	// libcni's result cache of a net-setup killed before its own
	// removal (network.cacheDirPrefix).
	caches, _ := filepath.Glob(filepath.Join(os.TempDir(), "pod1-cni-cache-"+p.UUID+"-*"))
	for _, c := range caches {
		left = append(left, "cache "+c)
	}
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(cmd).CombinedOutput()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, p.UUID) {
				left = append(left, cmd+": "+l)
			}
		}
	}
	if out, err := exec.Command("nft", "list", "ruleset").CombinedOutput(); err == nil && strings.Contains(string(out), p.UUID) {
		left = append(left, "nft rule naming the pod")
	}
	for _, dir := range []string{"/var/lib/cni", "/run/pod1-test-cni"} {
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), p.UUID) {
				left = append(left, "cni file "+path)
			}
			return nil
		})
	}
	for _, l := range links {
		if _, err := netlink.LinkByName(l); err == nil {
			left = append(left, "link "+l)
		}
	}
	return left
}

// gcPod runs the pod's gc entry point as rkt does.
func gcPod(t *testing.T, p *Pod, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventDeadline)
	defer cancel()
	gc := exec.CommandContext(ctx, filepath.Join(p.Dir, "stage1/rootfs/gc"), append(args, p.UUID)...)
	gc.Dir = p.Dir
	gc.WaitDelay = time.Second
	if out, err := gc.CombinedOutput(); err != nil {
		t.Fatalf("gc entry point: %v %s", err, out)
	}
}

// hostAddr is an IPv4 address of this machine outside the pod networks,
// or "" if it has none.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	must(t, err)
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() {
			continue
		}
		if _, p12, _ := net.ParseCIDR("172.16.0.0/12"); p12.Contains(ipn.IP) {
			continue
		}
		return ipn.IP.String()
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }

// withPorts adds to a pod manifest the app ports (app name -> name ->
// port) and the pod's host forwards (name -> host port), as rkt run
// --port writes them.
func withPorts(t *testing.T, m []byte, appPorts map[string]map[string]int, forwards map[string]int) []byte {
	t.Helper()
	var pm map[string]any
	must(t, json.Unmarshal(m, &pm))
	for _, a := range pm["apps"].([]any) {
		ra := a.(map[string]any)
		var ps []map[string]any
		for name, port := range appPorts[ra["name"].(string)] {
			ps = append(ps, map[string]any{"name": name, "protocol": "tcp", "port": port, "count": 1, "socketActivated": false})
		}
		if ps != nil {
			ra["app"].(map[string]any)["ports"] = ps
		}
	}
	var fs []map[string]any
	for name, hp := range forwards {
		fs = append(fs, map[string]any{"name": name, "hostPort": hp})
	}
	pm["ports"] = fs
	b, err := json.Marshal(pm)
	must(t, err)
	return b
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The probe's server counts a client only once it has said something, so
// that dialTCP's retries cannot use up its count: under QEMU's emulator a
// dial timed out after the kernel had completed the handshake, the server
// counted that silent connection, and TestNetPortForward's second client
// found no one listening. Run on the host, no pod needed.
func TestProbeServeCountsOnlyClientsThatSpeak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + itoa(freePort(t))
	cmd := exec.CommandContext(ctx, bin("probe"), "serve", addr, "1")
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line := make([]byte, 256)
	if n, err := out.Read(line); err != nil || !strings.Contains(string(line[:n]), "ready") {
		t.Fatalf("probe serve: %q, %v", line[:n], err)
	}
	silent, err := net.DialTimeout("tcp", addr, 5*time.Second)
	must(t, err)
	must(t, silent.Close())
	if got := dialTCP(t, addr, "second"); got != "pong second" {
		t.Fatalf("the client after a silent one got %q", got)
	}
}
