// Package podenv owns the pod-wide environment PID 1 sets up inside the
// pod's fresh namespaces: mount propagation, host name and the loopback
// interface. Each step fails with an error naming it.
package podenv

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Setup prepares the namespaces PID 1 was cloned into.
func Setup(hostname string, newNet, privateUsers bool) error {
	// Host mounts still propagate in (stage0 mounts app overlays for apps
	// added later); nothing mounted in the pod propagates out.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("set hostname %q: %w", hostname, err)
	}
	if newNet {
		if err := loopbackUp(); err != nil {
			return err
		}
		if privateUsers {
			if err := unprivilegedNet(); err != nil {
				return err
			}
		}
	}
	return nil
}

// unprivilegedNet lets apps in user namespaces bind ports below 1024 and
// ping, in the pod's own network namespace only. The namespace is the host
// root's, so CAP_NET_BIND_SERVICE and CAP_NET_RAW in an app's user
// namespace do not count in it; these two sysctls are what the kernel
// offers instead (as Docker sets them for its containers). Raw sockets
// other than ping stay out of reach.
func unprivilegedNet() error {
	for _, s := range []struct{ file, value string }{
		{"/proc/sys/net/ipv4/ip_unprivileged_port_start", "0"},
		{"/proc/sys/net/ipv4/ping_group_range", "0 2147483647"},
	} {
		if err := os.WriteFile(s.file, []byte(s.value), 0); err != nil {
			return fmt.Errorf("private users: %w", err)
		}
	}
	return nil
}

// loopbackUp sets lo up with the interface-flags ioctls, which need no
// netlink library in PID 1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set loopback up: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("find loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("find loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set loopback up: %w", err)
	}
	return nil
}
