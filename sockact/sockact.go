// Package sockact hands the sockets systemd passed rkt run (socket
// activation) to the apps of the pod whose manifests ask for them, as rkt's
// stage1 did through the systemd inside its pods.
//
// How they come: systemd (or systemd-socket-activate, or any program
// speaking the protocol) starts rkt run with its listening sockets at fds
// 3.., LISTEN_FDS saying how many and LISTEN_PID naming the process meant
// to take them, LISTEN_FDNAMES optionally naming each. rkt's stage0 execs
// the stage1's run entry point, the waiter (waiter/waiter.c), as the same
// process, so LISTEN_PID names the waiter; the waiter passes the fds on to
// the Go run, its child, which takes them here (Take) before it starts
// anything, and takes LISTEN_* out of its environment, so that nothing it
// starts (PID 1, net-setup, the CNI plugins, the lock keeper) sees them.
//
// The matching rule (Match), rkt's: rkt's stage1 wrote, for an app with
// ports marked socketActivated, a socket unit listening on each such port
// (its host port when rkt run --port named it, else its own number), and
// systemd gave that unit the passed socket of the same type and port, and
// the app the unit's sockets in the order of the manifest's ports. Here
// every socket-activated port of every app takes exactly one passed socket:
// a TCP port a listening stream socket, a UDP port a datagram socket, of
// IPv4 or IPv6, bound to that port (any address). The app gets its sockets
// as fds 3.. in the order of its manifest's ports, LISTEN_FDNAMES naming
// each after its port. What cannot be matched is refused, naming it, before
// anything starts: a passed socket no port takes, a port no socket (or two)
// matches, a socket of another kind (a Unix socket, a connected one), a
// port range.
//
// Where rkt's stage1 differs: its systemd closed a passed socket no unit
// took, and bound a socket of its own, in the pod's network namespace,
// for a port no passed socket matched (also when rkt run was not socket
// activated at all); pod1 refuses both, since either means the pod is not
// started as its units say.
package sockact

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/podplan"
)

// The protocol's variables (sd_listen_fds(3)); its sockets start at fd 3.
const (
	envPID   = "LISTEN_PID"
	envFds   = "LISTEN_FDS"
	envNames = "LISTEN_FDNAMES"
	firstFd  = 3
)

// MaxSockets bounds the sockets a pod takes (appexec.MaxListen is one
// app's bound).
const MaxSockets = 256

// Socket is one passed socket as Take found it.
type Socket struct {
	// Fd is its descriptor in the run process.
	Fd int
	// Name is its name in LISTEN_FDNAMES, or "".
	Name string
	// Family is unix.AF_INET, AF_INET6 or another; Type is its socket
	// type; Listening, for a stream socket, whether it listens.
	Family, Type int
	Listening    bool
	// Port is the port it is bound to (IPv4, IPv6), else 0.
	Port int
}

func (s *Socket) String() string {
	d := fmt.Sprintf("fd %d", s.Fd)
	if s.Name != "" {
		d += fmt.Sprintf(" (%q)", s.Name)
	}
	switch {
	case s.Family != unix.AF_INET && s.Family != unix.AF_INET6:
		return d + ", a socket of address family " + strconv.Itoa(s.Family)
	case s.Type == unix.SOCK_STREAM && s.Listening:
		return fmt.Sprintf("%s, tcp port %d", d, s.Port)
	case s.Type == unix.SOCK_STREAM:
		return fmt.Sprintf("%s, a tcp socket on port %d that is not listening", d, s.Port)
	case s.Type == unix.SOCK_DGRAM:
		return fmt.Sprintf("%s, udp port %d", d, s.Port)
	}
	return fmt.Sprintf("%s, a socket of type %d", d, s.Type)
}

// Passed are the sockets passed to the run process; none when it was not
// socket activated.
type Passed struct {
	Sockets []Socket
}

// Take reads the protocol's variables, removes them from the environment
// whatever they say (a stale LISTEN_PID must reach no process run starts),
// and, when LISTEN_PID is parent's (the waiter's, the process rkt's stage0
// exec'd), inspects the sockets LISTEN_FDS says are at fds 3... It must
// run before run opens or starts anything.
func Take(parent int) (*Passed, error) {
	pidv, hasPid := os.LookupEnv(envPID)
	fdsv := os.Getenv(envFds)
	namesv, hasNames := os.LookupEnv(envNames)
	for _, v := range []string{envPID, envFds, envNames} {
		_ = os.Unsetenv(v)
	}
	if !hasPid {
		return &Passed{}, nil
	}
	pid, err := strconv.Atoi(pidv)
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("%s=%q: not a process id", envPID, pidv)
	}
	if pid != parent {
		// Meant for another process (sd_listen_fds ignores it too).
		return &Passed{}, nil
	}
	n, err := strconv.Atoi(fdsv)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%s=%q: not a number of sockets", envFds, fdsv)
	}
	if n > MaxSockets {
		return nil, fmt.Errorf("%s=%d: more than %d sockets", envFds, n, MaxSockets)
	}
	var names []string
	if hasNames && namesv != "" && n > 0 {
		names = strings.Split(namesv, ":")
		if len(names) != n {
			return nil, fmt.Errorf("%s=%q: %d names for %s=%d", envNames, namesv, len(names), envFds, n)
		}
	}
	p := &Passed{}
	for i := range n {
		s, err := inspect(firstFd + i)
		if err != nil {
			return nil, fmt.Errorf("%s=%d: fd %d: %w", envFds, n, firstFd+i, err)
		}
		if names != nil {
			s.Name = names[i]
		}
		p.Sockets = append(p.Sockets, s)
	}
	return p, nil
}

// inspect says what the socket at fd is; anything but a socket is an
// error.
func inspect(fd int) (Socket, error) {
	s := Socket{Fd: fd}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return s, fmt.Errorf("not open: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return s, errors.New("not a socket")
	}
	var err error
	if s.Family, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		return s, fmt.Errorf("SO_DOMAIN: %w", err)
	}
	if s.Type, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return s, fmt.Errorf("SO_TYPE: %w", err)
	}
	if s.Type == unix.SOCK_STREAM {
		acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		if err != nil {
			return s, fmt.Errorf("SO_ACCEPTCONN: %w", err)
		}
		s.Listening = acc != 0
	}
	if s.Family == unix.AF_INET || s.Family == unix.AF_INET6 {
		sa, err := unix.Getsockname(fd)
		if err != nil {
			return s, fmt.Errorf("getsockname: %w", err)
		}
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			s.Port = a.Port
		case *unix.SockaddrInet6:
			s.Port = a.Port
		}
	}
	return s, nil
}

// fits reports whether s can be port's socket.
func fits(s *Socket, p *podplan.SocketPort) bool {
	if s.Family != unix.AF_INET && s.Family != unix.AF_INET6 || s.Port != p.HostPort {
		return false
	}
	switch p.Protocol {
	case "tcp":
		return s.Type == unix.SOCK_STREAM && s.Listening
	case "udp":
		return s.Type == unix.SOCK_DGRAM
	}
	return false
}

// Match gives each socket-activated port of the pod's apps its passed
// socket, by the rule the package says, and records in each app which of
// p's sockets it gets (podplan.App.Sockets, Fd the run process's until
// Hand numbers them as PID 1's), or says, in one line, what cannot be matched.
// privateUsers: the apps run in user namespaces (--private-users), whose
// set-up does not carry sockets.
func Match(p *Passed, pod *podplan.Pod, privateUsers bool) error {
	claimed := make([]string, len(p.Sockets))
	for i := range pod.Apps {
		a := &pod.Apps[i]
		name := a.Spec.Name
		a.Sockets = nil
		if len(a.SocketPorts) > 0 && privateUsers {
			return fmt.Errorf("app %q: ports: socket-activated port %q: socket activation is not supported with --private-users", name, a.SocketPorts[0].Name)
		}
		if len(a.SocketPorts) > MaxSockets {
			return fmt.Errorf("app %q: ports: %d socket-activated ports, at most %d", name, len(a.SocketPorts), MaxSockets)
		}
		for j := range a.SocketPorts {
			sp := &a.SocketPorts[j]
			field := fmt.Sprintf("app %q: ports: socket-activated port %q (%s %d)", name, sp.Name, sp.Protocol, sp.HostPort)
			if sp.Count > 1 {
				return fmt.Errorf("%s: a range of %d ports; a socket-activated port is one port", field, sp.Count)
			}
			if sp.Protocol != "tcp" && sp.Protocol != "udp" {
				return fmt.Errorf("%s: protocol %q, want tcp or udp", field, sp.Protocol)
			}
			if len(p.Sockets) == 0 {
				return fmt.Errorf("%s: no socket was passed for it: rkt run was not socket activated (%s, %s)", field, envFds, envPID)
			}
			found := -1
			for k := range p.Sockets {
				if !fits(&p.Sockets[k], sp) {
					continue
				}
				if found >= 0 {
					return fmt.Errorf("%s: two passed sockets match it: %v and %v", field, &p.Sockets[found], &p.Sockets[k])
				}
				found = k
			}
			if found < 0 {
				return fmt.Errorf("%s: no passed socket is one (a listening tcp socket, or a udp socket, bound to port %d); passed: %s", field, sp.HostPort, p.describe())
			}
			if claimed[found] != "" {
				return fmt.Errorf("%s: its socket, %v, is %s's already", field, &p.Sockets[found], claimed[found])
			}
			claimed[found] = fmt.Sprintf("app %q's port %q", name, sp.Name)
			a.Sockets = append(a.Sockets, podplan.Socket{Fd: p.Sockets[found].Fd, Name: sp.Name})
		}
	}
	for k := range p.Sockets {
		if claimed[k] == "" {
			return fmt.Errorf("%s: passed socket %v: no app has a socket-activated port it matches (same protocol, bound to the port the app's port is forwarded from, or its own)", envFds, &p.Sockets[k])
		}
	}
	return nil
}

// describe lists the passed sockets, for a refusal.
func (p *Passed) describe() string {
	d := make([]string, len(p.Sockets))
	for i := range p.Sockets {
		d[i] = p.Sockets[i].String()
	}
	return strings.Join(d, "; ")
}

// Hand appends the apps' sockets (Match gave each passed socket to one
// app) to files, the descriptors run starts PID 1 with, indexed by their
// number there, and renumbers each app's as PID 1 then holds it.
func Hand(pod *podplan.Pod, files []uintptr) []uintptr {
	for i := range pod.Apps {
		for j := range pod.Apps[i].Sockets {
			s := &pod.Apps[i].Sockets[j]
			files = append(files, uintptr(s.Fd))
			s.Fd = len(files) - 1
		}
	}
	return files
}

// RefuseAdded refuses an app added to a running pod (rkt app add) that has
// socket-activated ports: the passed sockets were handed out when the pod
// started, and none is left for it.
func RefuseAdded(a *podplan.App) error {
	if len(a.SocketPorts) == 0 {
		return nil
	}
	sp := a.SocketPorts[0]
	return fmt.Errorf("app %q: ports: socket-activated port %q (%s %d): an app added to a running pod gets no socket (the sockets passed to rkt run go to the pod's apps when it starts)", a.Spec.Name, sp.Name, sp.Protocol, sp.HostPort)
}
