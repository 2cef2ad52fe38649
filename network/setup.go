package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/network/netinfo"
	"github.com/pod1/pod1/resolvconf"
	"github.com/pod1/pod1/safefile"
)

// Params describe one pod's networking.
type Params struct {
	PodDir      string
	UUID        string
	Stage1Root  string
	LocalConfig string
	Nets        []Request
	// NetnsPid is a process in the pod's network namespace (PID 1).
	NetnsPid int
	// DNS writes the first DNS answer of a plugin to the apps'
	// resolv.conf (stage1/rootfs/etc/rkt-resolv.conf) unless one is
	// there already (rkt: only with --dns-conf-mode resolv=default).
	DNS bool
	// Ports are forwarded from the host to the pod on the first network
	// with IP masquerading, else on the last one (rkt's choice).
	Ports []netinfo.PortMapping
	Debug bool
	// Step, if set, is called at each step of the setup ("bound",
	// "recorded:NET", "added:NET", "ports:NET", "done"): the tests
	// kill the stage1 there.
	Step func(string)
}

func (p *Params) step(s string) {
	if p.Step != nil {
		p.Step(s)
	}
}

// Setup runs the plugins' ADD for every requested network. On any error
// it tears down what it did and returns an error naming the network.
func Setup(ctx context.Context, p *Params) (err error) {
	confs, err := Load(p.Stage1Root, p.LocalConfig, p.Nets)
	if err != nil {
		return err
	}
	if len(confs) == 0 {
		return nil
	}
	args := map[string]string{}
	for _, r := range p.Nets {
		args[r.Name] = r.Args
	}
	dirs := PluginDirs(p.Stage1Root, p.LocalConfig)
	pe := &pluginExec{debug: p.Debug}
	// Missing plugins are found before anything is made.
	fwd := forwardNet(confs)
	for i, c := range confs {
		if _, err := pe.FindInPath(c.Type, dirs); err != nil {
			return fmt.Errorf("network %q: %w", c.Name, err)
		}
		if i == fwd && len(p.Ports) > 0 {
			if _, err := pe.FindInPath("portmap", dirs); err != nil {
				return fmt.Errorf("network %q: port forwarding: %w", c.Name, err)
			}
		}
	}
	if len(p.Ports) > 0 {
		// A port a running pod has refuses the pod before anything of
		// it is made; the look that counts is the one under the lock,
		// before portmap's ADD (forwardPorts).
		if err := checkHostPorts(ctx, p.PodDir, p.UUID, p.Ports, false); err != nil {
			return err
		}
	}
	if err := mkdirNoFollow(filepath.Join(p.PodDir, layout.NetDir)); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// A setup that ran out of time still gets its undo.
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if terr := Teardown(tctx, p.PodDir, p.Stage1Root, p.LocalConfig, p.UUID, p.Debug); terr != nil {
				logx.Warnf("network teardown after a failed setup: %v", terr)
			}
		}
	}()
	if err = bindNetns(p.PodDir, p.UUID, p.NetnsPid); err != nil {
		return err
	}
	p.step("bound")
	cache, err := os.MkdirTemp("", cacheDirPrefix(p.UUID))
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(cache) }()
	cni := libcni.NewCNIConfigWithCacheDir(dirs, cache, pe)
	netDir := filepath.Join(p.PodDir, layout.NetDir)
	var nis []netinfo.NetInfo
	dnsDone := !p.DNS
	for i, c := range confs {
		ni := netinfo.NetInfo{
			NetName:  c.Name,
			ConfPath: netinfo.ConfCopy(c.Name),
			IfName:   "eth" + strconv.Itoa(i),
			Args:     args[c.Name],
		}
		ni.PluginPath, _ = pe.FindInPath(c.Type, dirs)
		if i == fwd {
			ni.Ports = p.Ports
			ni.Forward = true
		}
		// The copy and the entry come before the ADD: a setup killed
		// during it leaves gc what it needs for the DEL.
		if err := safefile.WriteIn(netDir, c.Name+".conf", c.Bytes, 0o644, safefile.Volatile); err != nil {
			return fmt.Errorf("network %q: save configuration: %w", c.Name, err)
		}
		nis = append(nis, ni)
		if err := netinfo.SaveIn(p.PodDir, nis); err != nil {
			return fmt.Errorf("network %q: %w", c.Name, err)
		}
		p.step("recorded:" + c.Name)
		res, err := addNet(ctx, cni, c, &nis[i], p.UUID)
		if err != nil {
			if ip, ok := ipTaken(err); ok {
				// rkt's words, which its users and tests match.
				return fmt.Errorf("requested IP address %q is not available in network: %s", ip, c.Name)
			}
			return fmt.Errorf("network %q: %w", c.Name, err)
		}
		p.step("added:" + c.Name)
		if err := netinfo.SaveIn(p.PodDir, nis); err != nil {
			return fmt.Errorf("network %q: %w", c.Name, err)
		}
		if !dnsDone && dnsSet(&res.DNS) {
			dnsDone = true
			if err := writeResolv(p.Stage1Root, c.Name, &res.DNS); err != nil {
				return fmt.Errorf("network %q: %w", c.Name, err)
			}
		}
		if i == fwd && len(p.Ports) > 0 {
			if err := forwardPorts(ctx, cni, &nis[i], res, p); err != nil {
				var taken *PortTakenError
				if errors.As(err, &taken) {
					return err
				}
				return fmt.Errorf("network %q: port forwarding: %w", c.Name, err)
			}
			p.step("ports:" + c.Name)
		}
	}
	p.step("done")
	return nil
}

// forwardNet is the index of the network host ports go to.
func forwardNet(confs []*Conf) int {
	for i, c := range confs {
		if c.IPMasq {
			return i
		}
	}
	return len(confs) - 1
}

// runtimeConf is what the plugins get in their environment: rkt's
// conventions (the namespace's path under /var/run/netns, the pod's UUID
// as the container ID, eth<N>). The network's arguments reach every
// plugin of its chain (the main one, its IPAM), each taking the keys it
// knows: CNI_ARGS gets IgnoreUnknown=1, without which the plugins of
// today refuse any key they do not know (--net=macvlan:IP=... would fail
// in macvlan, which knows only MAC), unless the user gave it.
func runtimeConf(ni *netinfo.NetInfo, uuid string) *libcni.RuntimeConf {
	kv, _ := netinfo.CNIArgs(ni.Args) // checked when parsed
	if len(kv) > 0 {
		given := false
		for _, p := range kv {
			given = given || strings.EqualFold(p[0], "IgnoreUnknown")
		}
		if !given {
			kv = append([][2]string{{"IgnoreUnknown", "1"}}, kv...)
		}
	}
	return &libcni.RuntimeConf{ContainerID: uuid, NetNS: netinfo.NetnsPath(uuid), IfName: ni.IfName, Args: kv}
}

// ipTakenRE matches host-local's refusal of a requested address taken by
// another pod.
var ipTakenRE = regexp.MustCompile(`requested IP address ([0-9a-fA-F.:]+) is not available`)

func ipTaken(err error) (string, bool) {
	m := ipTakenRE.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[1], true
}

func addNet(ctx context.Context, cni *libcni.CNIConfig, c *Conf, ni *netinfo.NetInfo, uuid string) (*current.Result, error) {
	nc, err := libcni.NetworkPluginConfFromBytes(c.Bytes)
	if err != nil {
		return nil, err
	}
	r, err := cni.AddNetwork(ctx, nc, runtimeConf(ni, uuid))
	if err != nil {
		return nil, err
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("plugin result: %w", err)
	}
	for _, ipc := range res.IPs {
		if v4 := ipc.Address.IP.To4(); v4 != nil {
			ni.IP = v4
			ni.Mask = net.IP(ipc.Address.Mask)
			ni.HostIP = ipc.Gateway
			break
		}
	}
	return res, nil
}

// portmapConf is the portmap plugin's configuration for a network's
// forwards; its name is the network's with a suffix, so that libcni's
// cached result for the network itself is kept apart.
func portmapConf(ni *netinfo.NetInfo, prev *current.Result) (*libcni.NetworkConfig, error) {
	m := map[string]any{
		"cniVersion":   current.ImplementedSpecVersion,
		"name":         ni.NetName + "-portmap",
		"type":         "portmap",
		"snat":         true,
		"capabilities": map[string]bool{"portMappings": true},
	}
	if prev != nil {
		m["prevResult"] = prev
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return libcni.NetworkPluginConfFromBytes(b)
}

func portmapRuntime(ni *netinfo.NetInfo, uuid string) *libcni.RuntimeConf {
	rt := runtimeConf(ni, uuid)
	var pms []map[string]any
	for _, p := range ni.Ports {
		pm := map[string]any{"hostPort": p.HostPort, "containerPort": p.ContainerPort, "protocol": p.Protocol}
		if p.HostIP != "" {
			pm["hostIP"] = p.HostIP
		}
		pms = append(pms, pm)
	}
	rt.CapabilityArgs = map[string]any{"portMappings": pms}
	return rt
}

func addPorts(ctx context.Context, cni *libcni.CNIConfig, ni *netinfo.NetInfo, res *current.Result, uuid string) error {
	if ni.IP == nil {
		return errors.New("the network gave the pod no IPv4 address")
	}
	prev, err := res.GetAsVersion(current.ImplementedSpecVersion)
	if err != nil {
		return err
	}
	pr, ok := prev.(*current.Result)
	if !ok {
		return errors.New("unexpected plugin result type")
	}
	nc, err := portmapConf(ni, pr)
	if err != nil {
		return err
	}
	_, err = cni.AddNetwork(ctx, nc, portmapRuntime(ni, uuid))
	return err
}

// forwardPorts claims the pod's host ports and has portmap forward them,
// under the host's lock of host ports (hostports.go): a port a running
// pod forwards refuses the pod, an ended pod's forward of it is removed.
func forwardPorts(ctx context.Context, cni *libcni.CNIConfig, ni *netinfo.NetInfo, res *current.Result, p *Params) error {
	unlock, err := lockHostPorts(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := checkHostPorts(ctx, p.PodDir, p.UUID, p.Ports, true); err != nil {
		return err
	}
	return addPorts(ctx, cni, ni, res, p.UUID)
}

func dnsSet(d *types.DNS) bool {
	return len(d.Nameservers) > 0 || d.Domain != "" || len(d.Search) > 0 || len(d.Options) > 0
}

// writeResolv writes the apps' resolv.conf from a plugin's DNS answer,
// unless stage0 already wrote one.
func writeResolv(stage1Root, name string, d *types.DNS) error {
	etc := filepath.Join(stage1Root, "etc")
	if _, err := os.Lstat(filepath.Join(stage1Root, layout.HostResolvIn)); err == nil {
		logx.Warnf("network %q gave DNS settings, but the pod has a resolv.conf already", name)
		return nil
	}
	conf := resolvconf.Render("pod1 from network "+name, d.Nameservers, d.Search, d.Options, d.Domain)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	if err := safefile.WriteIn(etc, filepath.Base(layout.HostResolvIn), conf, 0o644, safefile.Volatile); err != nil {
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	return os.Chmod(filepath.Join(stage1Root, layout.HostResolvIn), 0o644)
}

func mkdirNoFollow(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// bindNetns bind-mounts the network namespace of pid on
// netinfo.NetnsPath(uuid), where rkt puts it. The path is written to
// <pod>/netns first (rkt's record, which rkt's tools read): a run killed
// just after the mount leaves gc a file that tells it to look.
func bindNetns(podDir, uuid string, pid int) error {
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return fmt.Errorf("pod network namespace: %w", err)
	}
	defer ns.Close()
	target := netinfo.NetnsPath(uuid)
	if err := writeNew(podDir, layout.Netns, target); err != nil {
		return err
	}
	if err := os.MkdirAll(netinfo.NetnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", netinfo.NetnsDir, err)
	}
	fd, err := unix.Open(target, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return fmt.Errorf("create %s: %w", target, err)
	}
	defer unix.Close(fd)
	src := "/proc/self/fd/" + strconv.Itoa(int(ns.Fd()))
	if err := unix.Mount(src, "/proc/self/fd/"+strconv.Itoa(fd), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the network namespace on %s: %w", target, err)
	}
	return nil
}

// writeNew creates name in dir with content, refusing one that exists or
// a symlink.
func writeNew(dir, name, content string) error {
	d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	fd, err := unix.Openat(d, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
