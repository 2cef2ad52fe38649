// Package podenv owns the pod-wide environment PID 1 sets up inside the
// pod's fresh namespaces: mount propagation, host name and the loopback
// interface. Each step fails with an error naming it.
package podenv

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Setup prepares the namespaces PID 1 was cloned into.
func Setup(hostname string, newNet bool) error {
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
	}
	return nil
}

func loopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set loopback up: %w", err)
	}
	return nil
}
