package sockact

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/podplan"
)

func tcp(fd, port int) Socket {
	return Socket{Fd: fd, Family: unix.AF_INET6, Type: unix.SOCK_STREAM, Listening: true, Port: port}
}

func udp(fd, port int) Socket {
	return Socket{Fd: fd, Family: unix.AF_INET, Type: unix.SOCK_DGRAM, Port: port}
}

func app(name string, ports ...podplan.SocketPort) podplan.App {
	return podplan.App{Spec: appexec.Spec{Name: name}, SocketPorts: ports}
}

func port(name, proto string, hostPort int) podplan.SocketPort {
	return podplan.SocketPort{Name: name, Protocol: proto, Port: 80, HostPort: hostPort}
}

// Each app gets its sockets in its ports' order, whatever the order they
// were passed in.
func TestMatchOrdersByTheAppsPorts(t *testing.T) {
	p := &Passed{Sockets: []Socket{udp(3, 53), tcp(4, 8080), tcp(5, 8443)}}
	pod := &podplan.Pod{Apps: []podplan.App{
		app("web", port("https", "tcp", 8443), port("http", "tcp", 8080)),
		app("plain"),
		app("dns", port("dns", "udp", 53)),
	}}
	if err := Match(p, pod, false); err != nil {
		t.Fatal(err)
	}
	files := Hand(pod, make([]uintptr, 11))
	want := map[string][]podplan.Socket{
		"web": {{Fd: 11, Name: "https"}, {Fd: 12, Name: "http"}},
		"dns": {{Fd: 13, Name: "dns"}},
	}
	for _, a := range pod.Apps {
		if got := a.Sockets; !slices.Equal(got, want[a.Spec.Name]) {
			t.Errorf("app %s: sockets %v, want %v", a.Spec.Name, got, want[a.Spec.Name])
		}
	}
	if got := files[11:]; !slices.Equal(got, []uintptr{5, 4, 3}) {
		t.Errorf("PID 1's files from 11: %v, want [5 4 3]", got)
	}
}

func TestMatchRefuses(t *testing.T) {
	cases := []struct {
		name    string
		sockets []Socket
		apps    []podplan.App
		userns  bool
		want    string
	}{
		{"unclaimed", []Socket{tcp(3, 80)}, []podplan.App{app("a")}, false, "passed socket fd 3, tcp port 80: no app has"},
		{"none passed", nil, []podplan.App{app("a", port("p", "tcp", 80))}, false, "no socket was passed for it"},
		{"protocol", []Socket{udp(3, 80)}, []podplan.App{app("a", port("p", "tcp", 80))}, false, "no passed socket is one"},
		{"not listening", []Socket{{Fd: 3, Family: unix.AF_INET, Type: unix.SOCK_STREAM, Port: 80}}, []podplan.App{app("a", port("p", "tcp", 80))}, false, "not listening"},
		{"unix", []Socket{{Fd: 3, Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Listening: true}}, []podplan.App{app("a", port("p", "tcp", 80))}, false, "address family 1"},
		{"two match", []Socket{tcp(3, 80), tcp(4, 80)}, []podplan.App{app("a", port("p", "tcp", 80))}, false, "two passed sockets match it"},
		{"one for two", []Socket{tcp(3, 80)}, []podplan.App{app("a", port("p", "tcp", 80)), app("b", port("q", "tcp", 80))}, false, `is app "a"'s port "p"'s already`},
		{"range", []Socket{tcp(3, 80)}, []podplan.App{app("a", podplan.SocketPort{Name: "p", Protocol: "tcp", Port: 80, HostPort: 80, Count: 2})}, false, "a range of 2 ports"},
		{"userns", []Socket{tcp(3, 80)}, []podplan.App{app("a", port("p", "tcp", 80))}, true, "--private-users"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Match(&Passed{Sockets: c.sockets}, &podplan.Pod{Apps: c.apps}, c.userns)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Match: %v, want an error with %q", err, c.want)
			}
		})
	}
}
