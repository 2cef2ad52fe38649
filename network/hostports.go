package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/network/netinfo"
	"github.com/pod1/pod1/safefile"
)

// Host ports are one host's: the portmap plugin appends each pod's jump
// to the shared CNI-HOSTPORT-DNAT chain whatever is there, so a second
// pod on a port would get a rule of its own behind the first's, and a
// pod that ended would keep the port (its rule first, forwarding to a
// namespace where nothing listens) until gc. Before portmap runs, the
// forwards already on the host are read from iptables, which only the
// host writes (a pod's files would let it block another's port, or hide
// its own): a running pod's forward of the port refuses the new pod, an
// ended pod's forward is removed. One host-wide lock makes the look and
// portmap's ADD one step, so that two pods started at once cannot both
// take a port.

// hostPortsLock serializes the claims of host ports of every pod of the
// host, whatever its data directory. /run is the host's, writable by
// root alone, and cleared at boot, when no forward is left either.
const hostPortsLock = "/run/pod1-hostports.lock"

// The portmap plugin's shared chain and its per-pod chains' prefix
// (containernetworking/plugins, plugins/meta/portmap), in the nat table.
const (
	dnatChain       = "CNI-HOSTPORT-DNAT"
	podDnatChainPfx = "CNI-DN-"
)

// portmapComment is the comment portmap puts on each pod's jump: the
// configuration's name and the container ID, the pod's UUID.
var portmapComment = regexp.MustCompile(`^dnat name: "([^"]*)" id: "([^"]*)"$`)

// podUUID is a UUID as rkt writes it and the stage1 passes it to the
// plugins (lower case).
var podUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// hostForward is one pod's forward found in the host's nat table.
type hostForward struct {
	cmd   string // iptables or ip6tables
	chain string // the pod's CNI-DN- chain
	owner string // the pod's UUID
	// jumps are the arguments of the rules of CNI-HOSTPORT-DNAT that
	// jump to chain, as iptables -S prints them after -A CHAIN.
	jumps [][]string
	ports []netinfo.PortMapping // protocol, host port and host IP of each DNAT
}

// PortTakenError is a host port that a running pod forwards.
type PortTakenError struct {
	Port  netinfo.PortMapping
	Owner string
	// Why, if set, says that the owner could not be judged (and is
	// taken to run).
	Why error
}

func (e *PortTakenError) Error() string {
	if e.Why != nil {
		return fmt.Sprintf("host port %s is forwarded to pod %s, which cannot be told to have ended: %v", portString(e.Port), e.Owner, e.Why)
	}
	return fmt.Sprintf("host port %s is forwarded to running pod %s", portString(e.Port), e.Owner)
}

// portString is a host port as the user gave it: protocol, the host
// address if one, the port.
func portString(p netinfo.PortMapping) string {
	if p.HostIP != "" {
		return p.Protocol + "/" + net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort))
	}
	return p.Protocol + "/" + strconv.Itoa(p.HostPort)
}

// overlap reports whether two forwards take the same host port: the same
// protocol and port, on the same address or on every one.
func overlap(a, b netinfo.PortMapping) bool {
	if !strings.EqualFold(a.Protocol, b.Protocol) || a.HostPort != b.HostPort {
		return false
	}
	if a.HostIP == "" || b.HostIP == "" {
		return true
	}
	ia, ib := net.ParseIP(a.HostIP), net.ParseIP(b.HostIP)
	return ia != nil && ia.Equal(ib)
}

// checkHostPorts refuses ports that a running pod other than uuid
// forwards, with a PortTakenError. With clear, the forwards of pods that
// ended and take one of the ports are removed; without, they are let be
// (the look before anything of the pod is made, outside the lock).
func checkHostPorts(ctx context.Context, podDir, uuid string, ports []netinfo.PortMapping, clear bool) error {
	// A removal that another process undoes or races (the ended pod's
	// gc) is looked at again; twice is more than any such race needs.
	var removeErr error
	for round := 0; ; round++ {
		fws, err := listHostForwards(ctx)
		if err != nil {
			return fmt.Errorf("host ports: %w", err)
		}
		live := map[string]bool{}
		var stale []*hostForward
		for i := range fws {
			f := &fws[i]
			if f.owner == uuid {
				continue
			}
			p, ok := f.takes(ports)
			if !ok {
				continue
			}
			running, known := live[f.owner]
			if !known {
				var err error
				if running, err = podRunning(podDir, f.owner); err != nil {
					return &PortTakenError{Port: p, Owner: f.owner, Why: err}
				}
				live[f.owner] = running
			}
			if running {
				return &PortTakenError{Port: p, Owner: f.owner}
			}
			stale = append(stale, f)
		}
		if !clear || len(stale) == 0 {
			return nil
		}
		if round == 2 {
			if removeErr == nil {
				removeErr = errors.New("it is back after its removal")
			}
			return fmt.Errorf("host ports: remove the forward of ended pod %s: %w", stale[0].owner, removeErr)
		}
		removeErr = nil
		for _, f := range stale {
			removeErr = errors.Join(removeErr, removeHostForward(ctx, f))
		}
	}
}

// takes returns the first of ports that the forward takes too.
func (f *hostForward) takes(ports []netinfo.PortMapping) (netinfo.PortMapping, bool) {
	for _, p := range ports {
		for _, o := range f.ports {
			if overlap(p, o) {
				return p, true
			}
		}
	}
	return netinfo.PortMapping{}, false
}

// lockHostPorts takes the host-wide lock of host port claims, waiting
// for it as long as ctx lets; the returned function releases it.
func lockHostPorts(ctx context.Context) (func(), error) {
	for {
		fd, err := unix.Open(hostPortsLock, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("host ports lock: %w", err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
			unix.Close(fd)
			return nil, fmt.Errorf("host ports lock: %s is not a file of ours", hostPortsLock)
		}
		for {
			err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
			if err == nil || !errors.Is(err, unix.EWOULDBLOCK) {
				break
			}
			select {
			case <-ctx.Done():
				unix.Close(fd)
				return nil, fmt.Errorf("host ports lock: %w", ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("host ports lock: %w", err)
		}
		// A lock on a file removed (and made anew by another) while we
		// waited serializes nothing: take the one that is there.
		var now unix.Stat_t
		if unix.Stat(hostPortsLock, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino {
			return func() { unix.Close(fd) }, nil
		}
		unix.Close(fd)
	}
}

// listHostForwards reads the pods' forwards from the nat tables of
// iptables and, where the host has IPv6 NAT, ip6tables.
func listHostForwards(ctx context.Context) ([]hostForward, error) {
	out, err := iptablesList(ctx, "iptables")
	if err != nil {
		return nil, err
	}
	fws := parseForwards("iptables", out)
	// No ip6tables, or no IPv6 NAT in the kernel: no IPv6 forward either.
	if out6, err := iptablesList(ctx, "ip6tables"); err == nil {
		fws = append(fws, parseForwards("ip6tables", out6)...)
	}
	return fws, nil
}

func iptablesList(ctx context.Context, cmd string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, cmd, "-w", "-t", "nat", "-S")
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("%s -t nat -S: %w: %s", cmd, err, lastLine(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// parseForwards finds in iptables -S output the pods' forwards: the
// jumps of CNI-HOSTPORT-DNAT to a CNI-DN- chain whose comment names a pod
// UUID, and that chain's DNAT rules.
func parseForwards(cmd string, out []byte) []hostForward {
	byChain := map[string]*hostForward{}
	var order []string
	dnats := map[string][]netinfo.PortMapping{}
	for _, line := range strings.Split(string(out), "\n") {
		args := splitRule(line)
		if len(args) < 2 || args[0] != "-A" {
			continue
		}
		chain, rule := args[1], args[2:]
		switch {
		case chain == dnatChain:
			target := ruleArg(rule, "-j")
			if !strings.HasPrefix(target, podDnatChainPfx) {
				continue
			}
			m := portmapComment.FindStringSubmatch(ruleArg(rule, "--comment"))
			if m == nil || !podUUID.MatchString(m[2]) {
				continue // not a pod's: another runtime's, or trimmed
			}
			f := byChain[target]
			if f == nil {
				f = &hostForward{cmd: cmd, chain: target, owner: m[2]}
				byChain[target] = f
				order = append(order, target)
			} else if f.owner != m[2] {
				continue
			}
			f.jumps = append(f.jumps, rule)
		case strings.HasPrefix(chain, podDnatChainPfx) && ruleArg(rule, "-j") == "DNAT":
			port, err := strconv.Atoi(ruleArg(rule, "--dport"))
			proto := ruleArg(rule, "-p")
			if err != nil || proto == "" {
				continue
			}
			pm := netinfo.PortMapping{HostPort: port, Protocol: proto}
			if d := ruleArg(rule, "-d"); d != "" {
				if ip, _, err := net.ParseCIDR(d); err == nil {
					pm.HostIP = ip.String()
				} else if ip := net.ParseIP(d); ip != nil {
					pm.HostIP = ip.String()
				}
			}
			dnats[chain] = append(dnats[chain], pm)
		}
	}
	var fws []hostForward
	for _, c := range order {
		f := byChain[c]
		f.ports = dnats[c]
		fws = append(fws, *f)
	}
	return fws
}

// ruleArg is the value after the option opt in a rule's arguments, or "".
func ruleArg(rule []string, opt string) string {
	for i := 0; i+1 < len(rule); i++ {
		if rule[i] == opt {
			return rule[i+1]
		}
	}
	return ""
}

// splitRule splits a line of iptables -S into its arguments: words
// separated by spaces, a double-quoted one taken whole with its
// backslash escapes undone (how iptables prints a comment).
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted = !quoted
			inWord = true
		case !quoted && (c == ' ' || c == '\t'):
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args
}

// removeHostForward removes an ended pod's forward: its jumps, then its
// chain. Its errors count only if the forward is still there when the
// caller looks again: what the pod's gc removed meanwhile fails here too.
func removeHostForward(ctx context.Context, f *hostForward) error {
	run := func(args ...string) error {
		var stderr bytes.Buffer
		c := exec.CommandContext(ctx, f.cmd, append([]string{"-w", "-t", "nat"}, args...)...)
		c.Stderr = &stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("%s %s: %w: %s", f.cmd, strings.Join(args, " "), err, lastLine(stderr.String()))
		}
		return nil
	}
	var errs []error
	for _, j := range f.jumps {
		errs = append(errs, run(append([]string{"-D", dnatChain}, j...)...))
	}
	errs = append(errs, run("-F", f.chain), run("-X", f.chain))
	return errors.Join(errs...)
}

// podRunning reports whether the pod uuid, which forwards a host port,
// still runs. A pod of this pod's data directory runs while its lock is
// held, as rkt tells (a shared lock that cannot be had); one in its
// garbage directories has ended. A pod found nowhere there is of another
// data directory (or removed): it runs while a process is in its network
// namespace, which its PID 1 is as long as the pod lives, and which no
// process of it is once its lock is free.
func podRunning(podDir, uuid string) (bool, error) {
	runDir := filepath.Dir(podDir)
	podsDir := filepath.Dir(runDir)
	if filepath.Base(runDir) == layout.PodsRun && filepath.Base(podsDir) == layout.PodsDir {
		fd, err := unix.Open(filepath.Join(runDir, uuid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			defer unix.Close(fd)
			return safefile.LockHeld(fd)
		case !errors.Is(err, unix.ENOENT):
			return false, err
		}
		for _, state := range []string{layout.PodsExitedGarbage, layout.PodsGarbage} {
			if _, err := os.Lstat(filepath.Join(podsDir, state, uuid)); err == nil {
				return false, nil
			}
		}
	}
	return netnsInUse(uuid)
}

// netnsInUse reports whether a process is in the pod's network namespace
// (its bind mount under /var/run/netns, which the host alone writes).
func netnsInUse(uuid string) (bool, error) {
	ns, err := openNetns(uuid)
	if err != nil || ns == nil {
		return false, err
	}
	defer ns.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		return false, err
	}
	proc, err := os.Open("/proc")
	if err != nil {
		return false, err
	}
	defer proc.Close()
	names, err := proc.Readdirnames(-1)
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		var s unix.Stat_t
		if unix.Stat("/proc/"+n+"/ns/net", &s) == nil && s.Dev == st.Dev && s.Ino == st.Ino {
			return true, nil
		}
	}
	return false, nil
}
