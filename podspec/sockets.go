package podspec

import (
	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/podplan"
)

// socketPorts lists app's ports marked socketActivated, in the manifest's
// order (the order the app gets its sockets in: package sockact), each
// with its own number as its host port until hostPorts resolves it.
func socketPorts(app *types.App) []podplan.SocketPort {
	var out []podplan.SocketPort
	for _, p := range app.Ports {
		if !p.SocketActivated {
			continue
		}
		out = append(out, podplan.SocketPort{Name: p.Name.String(), Protocol: p.Protocol, Port: int(p.Port), Count: p.Count, HostPort: int(p.Port)})
	}
	return out
}

// hostPorts gives each socket-activated port the host port the pod
// manifest forwards to it by name (rkt run --port=NAME:HOSTPORT), as rkt's
// stage1 wrote its socket units: a passed socket was made on the host, so
// it is bound to the host's port.
func hostPorts(apps []App, eps []types.ExposedPort) {
	for i := range apps {
		for j := range apps[i].SocketPorts {
			sp := &apps[i].SocketPorts[j]
			for _, ep := range eps {
				if ep.Name.String() == sp.Name && ep.HostPort != 0 {
					sp.HostPort = int(ep.HostPort)
					break
				}
			}
		}
	}
}
