// Package netinfo is the pod's record of its CNI networks, net-info.json
// in the pod directory, in rkt's format (rkt networking/netinfo): rkt
// status, rkt list and the pod1 host tools read it, and the gc entry point
// tears down what it names. It has no CNI dependency, so that the host
// tools and the stage1's own roles can read it without linking libcni.
package netinfo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// Where the pods' network namespaces are kept (the pod directory's
// files are layout's: NetInfo, Netns, NetDir).
const (
	// NetnsDir is where the pods' network namespaces are bind-mounted,
	// as rkt and `ip netns` do: the mount keeps the namespace, and the
	// interfaces in it, alive from setup to gc, so that every plugin's
	// DEL finds what its ADD made.
	NetnsDir = "/var/run/netns"
)

// MaxSize caps how much of net-info.json is read: the file is in the pod
// directory, and the host tools and gc must not be made to exhaust memory.
const MaxSize = 1 << 20

// PortMapping is a host port forwarded to the pod on a network.
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// NetInfo is one network of the pod. The first seven fields are rkt's;
// rkt's decoder ignores the others. An entry is written before its
// plugin's ADD runs, with no IP, so that a setup killed in the middle
// still tells gc what to tear down.
type NetInfo struct {
	NetName    string `json:"netName"`
	ConfPath   string `json:"netConf"`
	PluginPath string `json:"pluginPath"`
	IfName     string `json:"ifName"`
	IP         net.IP `json:"ip"`
	Args       string `json:"args"`
	Mask       net.IP `json:"mask"`
	// HostIP is the network's gateway as the plugin reported it.
	HostIP net.IP `json:"hostIP,omitempty"`
	// Ports are the host ports forwarded to the pod through this
	// network (the portmap plugin), recorded before they are set up.
	Ports []PortMapping `json:"portMappings,omitempty"`
	// Forward marks the network host ports go through, and at whose
	// gateway the apps reach the host's metadata service (rkt's
	// "forwardable" network: the first with ipMasq, else the last).
	Forward bool `json:"forward,omitempty"`
}

// MetadataHost is the host's address on the pod's forwarding network
// (its gateway), where the apps reach rkt's metadata service, or nil.
func MetadataHost(nis []NetInfo) net.IP {
	for _, ni := range nis {
		if ni.Forward {
			return ni.HostIP
		}
	}
	return nil
}

// ValidName reports whether name can name a network: libcni's rule
// ([a-zA-Z0-9][a-zA-Z0-9_.-]*), at most 128 bytes. Written out, not a
// regexp: the stage1's roles import this package, and a package-level
// regexp would be compiled at every one's start.
func ValidName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// validIfName reports whether s is an interface name the stage1 gives
// (rkt's eth<N>).
func validIfName(s string) bool {
	d := strings.TrimPrefix(s, "eth")
	if d == s || d == "" || len(d) > 3 {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

// NetnsPath is the bind mount of the network namespace of the pod uuid
// (a UUID already checked), rkt's cni-<id> name under NetnsDir. Derived
// from the UUID, never read from the pod directory.
func NetnsPath(uuid string) string { return NetnsDir + "/cni-" + uuid }

// ConfCopy is the path, relative to the pod directory, of the copy of the
// named network's configuration.
func ConfCopy(name string) string { return layout.NetDir + "/" + name + ".conf" }

// Validate checks an entry read from a pod directory, where it may have
// been planted: its names must be ones the stage1 writes, its conf path
// the copy the stage1 makes.
func (n *NetInfo) Validate() error {
	if !ValidName(n.NetName) {
		return fmt.Errorf("netName %q is not a valid network name", n.NetName)
	}
	if !validIfName(n.IfName) {
		return fmt.Errorf("network %q: ifName %q is not eth<N>", n.NetName, n.IfName)
	}
	if n.ConfPath != ConfCopy(n.NetName) {
		return fmt.Errorf("network %q: netConf %q is not %s", n.NetName, n.ConfPath, ConfCopy(n.NetName))
	}
	if len(n.Args) > 4096 || strings.ContainsAny(n.Args, "\x00\n") {
		return fmt.Errorf("network %q: args are too long or hold control characters", n.NetName)
	}
	for _, p := range n.Ports {
		if p.HostPort < 1 || p.HostPort > 65535 || p.ContainerPort < 1 || p.ContainerPort > 65535 {
			return fmt.Errorf("network %q: port mapping %d:%d out of range", n.NetName, p.HostPort, p.ContainerPort)
		}
		if p.Protocol != "tcp" && p.Protocol != "udp" {
			return fmt.Errorf("network %q: port mapping protocol %q", n.NetName, p.Protocol)
		}
		if p.HostIP != "" && net.ParseIP(p.HostIP) == nil {
			return fmt.Errorf("network %q: port mapping host IP %q", n.NetName, p.HostIP)
		}
	}
	return nil
}

// Parse decodes and validates net-info.json's content.
func Parse(b []byte) ([]NetInfo, error) {
	var nis []NetInfo
	if err := json.Unmarshal(b, &nis); err != nil {
		return nil, fmt.Errorf("%s: %w", layout.NetInfo, err)
	}
	seen := map[string]bool{}
	for i := range nis {
		if err := nis[i].Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", layout.NetInfo, err)
		}
		if seen[nis[i].NetName] || seen["if:"+nis[i].IfName] {
			return nil, fmt.Errorf("%s: network %q or interface %q listed twice", layout.NetInfo, nis[i].NetName, nis[i].IfName)
		}
		seen[nis[i].NetName], seen["if:"+nis[i].IfName] = true, true
	}
	return nis, nil
}

// ErrNone means the pod has no net-info.json.
var ErrNone = errors.New("no " + layout.NetInfo)

// LoadAt reads and validates net-info.json in the pod directory dirfd,
// never following a symlink or blocking on a FIFO.
func LoadAt(dirfd int) ([]NetInfo, error) {
	b, err := safefile.ReadRegularAt(dirfd, layout.NetInfo, MaxSize)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ErrNone
		}
		return nil, fmt.Errorf("%s: %w", layout.NetInfo, err)
	}
	return Parse(b)
}

// SaveIn replaces net-info.json in the pod directory atomically.
func SaveIn(podDir string, nis []NetInfo) error {
	if nis == nil {
		nis = []NetInfo{}
	}
	b, err := json.Marshal(nis)
	if err != nil {
		return err
	}
	if err := safefile.WriteIn(podDir, layout.NetInfo, append(b, '\n'), 0o644, safefile.Volatile); err != nil {
		return fmt.Errorf("write %s: %w", layout.NetInfo, err)
	}
	return nil
}

// Format is the "networks=" value of rkt status: name:ip4=IP, comma
// separated.
func Format(nis []NetInfo) string {
	parts := make([]string, 0, len(nis))
	for _, ni := range nis {
		ip := ""
		if ni.IP != nil {
			ip = ni.IP.String()
		}
		parts = append(parts, ni.NetName+":ip4="+ip)
	}
	return strings.Join(parts, ", ")
}
