// Package machined registers a pod with systemd-machined as the machine
// rkt's stage1 made of it, rkt-<uuid>, so that machinectl lists it,
// shows it and stops it, and the tools that find rkt's pods through
// machined find pod1's (docs/hosts.md, systemd hosts).
//
// Registration is best effort: a host without systemd, or with no system
// bus, is found out from two paths in /run before anything is dialled, and
// every exchange with the bus is bounded in time, so that a bus that hangs
// costs the pod's start one bounded wait and one warning, never the pod.
package machined

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pod1/pod1/layout"
)

const (
	// busSocket is the system bus, where machined listens.
	busSocket = "/run/dbus/system_bus_socket"
	// bootedDir exists only where systemd booted the host (sd_booted).
	bootedDir = "/run/systemd/system"

	dest    = "org.freedesktop.machine1"
	objPath = dbus.ObjectPath("/org/freedesktop/machine1")
	manager = "org.freedesktop.machine1.Manager"

	// Service and Class are what machinectl shows of the pod: rkt's
	// stage1 registered its pods as service "rkt", class "container".
	Service = "rkt"
	Class   = "container"

	// Timeout bounds each of a registration's two steps: connecting,
	// authenticating and a ping of machined; then the call, which for
	// CreateMachine includes systemd making the scope.
	Timeout = 5 * time.Second
)

// Booted reports whether systemd booted the host (sd_booted).
func Booted() bool {
	fi, err := os.Stat(bootedDir)
	return err == nil && fi.IsDir()
}

// Reachable reports, from the file system alone, whether machined may be
// asked at all: systemd booted the host and the system bus listens. It
// costs two stat calls, so a host without systemd pays nothing more.
func Reachable() bool {
	if !Booted() {
		return false
	}
	fi, err := os.Stat(busSocket)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// Name is the machine name of the pod uuid, rkt's: rkt-<uuid>. Only a
// well-formed UUID makes one: the name reaches machined and systemd's unit
// names, and nothing from a manifest or the pod directory may choose it.
func Name(uuid string) (string, error) {
	if !layout.IsUUID(uuid) {
		return "", fmt.Errorf("pod UUID %q is not a UUID", uuid)
	}
	return "rkt-" + uuid, nil
}

// machineID is the pod's UUID as the 128-bit machine id machined keeps
// (what rkt's stage1 gave the pod as /etc/machine-id).
func machineID(uuid string) ([]byte, error) {
	b, err := hex.DecodeString(layout.MachineID(uuid))
	if err != nil || len(b) != 16 {
		return nil, fmt.Errorf("pod UUID %q is not a UUID", uuid)
	}
	return b, nil
}

// Pod is what a registration says of the pod.
type Pod struct {
	// UUID names the machine (Name) and is its id.
	UUID string
	// Leader is the pod's PID 1, as the host sees it.
	Leader int
	// Root is the pod's root directory as machinectl shows it: the
	// stage1's root in the pod directory.
	Root string
}

func (p Pod) args() ([]any, error) {
	name, err := Name(p.UUID)
	if err != nil {
		return nil, err
	}
	id, err := machineID(p.UUID)
	if err != nil {
		return nil, err
	}
	if p.Leader <= 1 {
		return nil, fmt.Errorf("leader pid %d", p.Leader)
	}
	// machined takes only an absolute, normalised path.
	root := filepath.Clean(p.Root)
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("root directory %q is not absolute", p.Root)
	}
	return []any{name, id, Service, Class, uint32(p.Leader), root}, nil
}

// Register registers the pod with RegisterMachine: it stays in the cgroup
// it is in, and machined ties the machine to the unit that cgroup belongs
// to (systemd-nspawn --keep-unit). Stopping the machine stops that unit.
func Register(p Pod) error {
	args, err := p.args()
	if err != nil {
		return err
	}
	return call(busSocket, manager+".RegisterMachine", args...)
}

// Create registers the pod with CreateMachine: systemd makes the scope
// machine.slice/machine-rkt\x2d<uuid>.scope, delegated, and moves the
// leader into it before the call returns. Stopping the machine stops
// that scope.
func Create(p Pod) error {
	args, err := p.args()
	if err != nil {
		return err
	}
	// No scope property of ours: machined's own (Delegate=yes among
	// them) are what the pod needs.
	props := []struct {
		Name  string
		Value dbus.Variant
	}{}
	return call(busSocket, manager+".CreateMachine", append(args, props)...)
}

// errTimeout says the bus did not answer in time.
var errTimeout = errors.New("no answer from the system bus in time")

// ErrAbsent says machined is not on the bus and cannot be started there:
// a systemd host without it (Debian's systemd-container), where the pod
// runs unregistered and nothing is wrong.
var ErrAbsent = errors.New("systemd-machined is not on the system bus")

// call makes one method call on machined over a private connection to the
// bus at socket, in two steps each bounded by Timeout (the socket's
// deadline ends any read or write that waits past it): connecting,
// authenticating and a ping of machined, which the bus answers once
// machined runs (starting it if need be), then the call. A machined slow
// to start thus costs the pod a warning before anything is asked of it,
// never a CreateMachine that systemd carries out after we gave up on it.
func call(socket, method string, args ...any) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.Now().Add(Timeout)
	nc, err := (&net.Dialer{Deadline: deadline}).DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("system bus: %w", err)
	}
	if err := nc.SetDeadline(deadline); err != nil {
		_ = nc.Close()
		return fmt.Errorf("system bus: %w", err)
	}
	conn, err := dbus.NewConn(nc, dbus.WithContext(ctx))
	if err != nil {
		_ = nc.Close()
		return fmt.Errorf("system bus: %w", err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.Auth(nil); err != nil {
		return fmt.Errorf("system bus: %w", timedOut(err, deadline))
	}
	if err := conn.Hello(); err != nil {
		return fmt.Errorf("system bus: %w", timedOut(err, deadline))
	}
	if err := callOne(ctx, conn, deadline, "org.freedesktop.DBus.Peer.Ping"); err != nil {
		return err
	}
	deadline = time.Now().Add(Timeout)
	if err := nc.SetDeadline(deadline); err != nil {
		return fmt.Errorf("system bus: %w", err)
	}
	return callOne(ctx, conn, deadline, method, args...)
}

// callOne makes one call on machined, bounded by deadline.
func callOne(ctx context.Context, conn *dbus.Conn, deadline time.Time, method string, args ...any) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c := conn.Object(dest, objPath).CallWithContext(ctx, method, 0, args...)
	var de dbus.Error
	if errors.As(c.Err, &de) && (de.Name == "org.freedesktop.DBus.Error.ServiceUnknown" || de.Name == "org.freedesktop.DBus.Error.NameHasNoOwner") {
		return fmt.Errorf("%w: %w", ErrAbsent, c.Err)
	}
	if c.Err != nil {
		return fmt.Errorf("%s: %w", method[strings.LastIndexByte(method, '.')+1:], timedOut(c.Err, deadline))
	}
	return nil
}

func timedOut(err error, deadline time.Time) error {
	if !time.Now().Before(deadline) {
		return fmt.Errorf("%w (%w)", errTimeout, err)
	}
	return err
}
