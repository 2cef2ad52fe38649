package podplan

import (
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
)

// Socket is one listening socket that systemd passed rkt run (socket
// activation) and run matched to an app's socket-activated port (package
// sockact): PID 1 holds it at Fd and hands it to each run of the app's
// main process, which gets it among its fds 3.. under Name in
// LISTEN_FDNAMES.
type Socket struct {
	Fd   int    `json:"fd"`
	Name string `json:"name"`
}

// SocketPort is one of an app's ports with socketActivated set in its
// manifest, as run matches it to a passed socket: by protocol and by
// HostPort, the pod manifest's host port of that name (rkt run --port),
// else the port's own.
type SocketPort struct {
	Name     string
	Protocol string
	Port     int
	// Count is the manifest's count (a range of ports from Port).
	Count    uint
	HostPort int
}

// MainSpec returns what a run of the app's process in phase main (the
// app's own process, not an event handler) is started with: s with the
// names of its sockets (appexec.Spec.Listen), and the descriptors that go
// to its set-up process from appexec.ListenFd on. Any other phase, or an
// app without sockets, gets s as it is and none.
func (a *App) MainSpec(s *appexec.Spec, main bool) (*appexec.Spec, []uintptr) {
	if !main || len(a.Sockets) == 0 {
		return s, nil
	}
	c := *s
	fds := make([]uintptr, 0, len(a.Sockets))
	for _, sk := range a.Sockets {
		c.Listen = append(c.Listen, sk.Name)
		fds = append(fds, uintptr(sk.Fd))
	}
	return &c, fds
}

// CloseSockets closes PID 1's copies of the app's sockets, once no run of
// the app can come: a restart is what PID 1 keeps them for.
func (a *App) CloseSockets() {
	for _, sk := range a.Sockets {
		unix.Close(sk.Fd)
	}
	a.Sockets = nil
}

// CloseSockets closes PID 1's copies of the sockets of the app named app
// (CloseSockets of App).
func (p *Pod) CloseSockets(app string) {
	for i := range p.Apps {
		if p.Apps[i].Spec.Name == app {
			p.Apps[i].CloseSockets()
		}
	}
}
