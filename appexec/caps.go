package appexec

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"
)

// DefaultCapabilities is rkt's default capability set for an app that
// names no capability isolator (rkt:stage1/init/common, contract §5).
var DefaultCapabilities = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID",
	"CAP_FOWNER", "CAP_KILL", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_NET_BIND_SERVICE", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP",
	"CAP_SETFCAP", "CAP_SYS_CHROOT",
}

// EscapeCapabilities, the named escape set, reach the host from a pod
// that shares the host's user namespace, whatever else is in place:
// CAP_SYS_ADMIN mounts and enters namespaces, CAP_SYS_MODULE loads kernel
// code, CAP_DAC_READ_SEARCH opens host files by handle (the "shocker"
// exploit), CAP_SYS_RAWIO reads /dev/mem. Granting one is the user's
// choice; the stage1 warns. CAP_SYS_PTRACE is not among them: no stage1
// process is in the apps' pid namespace (Launch), so what it opens is the
// pod's apps only, as in any pod whose apps share a pid namespace.
var EscapeCapabilities = []string{
	"CAP_DAC_READ_SEARCH", "CAP_SYS_ADMIN", "CAP_SYS_MODULE", "CAP_SYS_RAWIO",
}

// capName is the isolator spelling of c: CAP_ and the upper-case name.
func capName(c capability.Cap) string { return "CAP_" + strings.ToUpper(c.String()) }

// capsByName maps every capability this build knows to its name, made
// once: the pod's start asks for a name many times (every comparison of
// a sort), and each ToUpper was an allocation on the start path.
var capsByName = sync.OnceValue(func() map[string]capability.Cap {
	m := map[string]capability.Cap{}
	for _, c := range capability.ListKnown() {
		m[capName(c)] = c
	}
	return m
})

// ParseCapability returns the capability called name (CAP_NET_ADMIN, ...).
func ParseCapability(name string) (capability.Cap, error) {
	if c, ok := capsByName()[name]; ok {
		return c, nil
	}
	return 0, fmt.Errorf("unknown capability %q", name)
}

// AllCapabilities lists every capability this build knows, by name.
func AllCapabilities() []string {
	var out []string
	for _, c := range capability.ListKnown() {
		out = append(out, capName(c))
	}
	return out
}

// SortCapabilities orders names by capability number, without duplicates;
// the names must be valid.
func SortCapabilities(names []string) []string {
	out := slices.Clone(names)
	byName := capsByName()
	slices.SortFunc(out, func(a, b string) int { return int(byName[a]) - int(byName[b]) })
	return slices.Compact(out)
}

// applyCapabilities sets the calling thread's bounding set to keep (all
// of it when unrestricted) and returns what it kept: a capability the
// stage1 itself was started without cannot be given back. It runs while
// the thread is still root with every capability: dropping from the
// bounding set needs CAP_SETPCAP.
func applyCapabilities(keep []string, unrestricted bool) ([]string, error) {
	if unrestricted {
		return nil, nil
	}
	// Not Load: it reads /proc/self/status, and the app's /proc, where
	// the set-up process may be by now, does not show it (the apps' pid
	// namespace). Only the bounding set is applied, all of it set here.
	c, err := capability.NewPid2(0)
	if err != nil {
		return nil, err
	}
	c.Clear(capability.BOUNDS)
	var kept []string
	for _, n := range keep {
		cp, err := ParseCapability(n)
		if err != nil {
			return nil, err
		}
		if have, err := capability.GetBound(cp); err != nil || !have {
			continue
		}
		c.Set(capability.BOUNDING, cp)
		kept = append(kept, n)
	}
	if err := c.Apply(capability.BOUNDS); err != nil {
		return nil, fmt.Errorf("drop from the bounding set: %w", err)
	}
	return kept, nil
}

// finishCapabilities runs after the uid change: it raises the effective
// set to the permitted one (so a thread that kept its capabilities across
// setresuid may still install the seccomp filter, which needs
// CAP_SYS_ADMIN without no_new_privs), empties the inheritable and ambient
// sets, and checks the bounding set is what was asked. At execve the
// kernel then gives a root app exactly the bounding set as its permitted
// and effective sets, and any other app none: with empty inheritable and
// ambient sets nothing else carries over (CVE-2022-29162: a non-empty
// inheritable set let file capabilities raise privileges).
func finishCapabilities(keep []string, unrestricted bool) error {
	// capget and capset with pid 0 act on the calling thread, and read
	// nothing of /proc (which may be the app's by now, where this
	// process has no pid).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	for i := range data {
		data[i].Inheritable = 0
		data[i].Effective = data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("set capabilities: %w", err)
	}
	if err := capability.ResetAmbient(); err != nil {
		return fmt.Errorf("clear the ambient set: %w", err)
	}
	// Read the result back from the kernel itself.
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	last, err := capability.LastCap()
	if err != nil {
		return err
	}
	for cp := capability.Cap(0); cp <= last; cp++ {
		amb, err := capability.GetAmbient(cp)
		if err != nil {
			return fmt.Errorf("%s: read ambient set: %w", capName(cp), err)
		}
		if amb || data[cp/32].Inheritable&(1<<(cp%32)) != 0 {
			return fmt.Errorf("%s still inheritable or ambient", capName(cp))
		}
		if unrestricted {
			continue
		}
		bnd, err := capability.GetBound(cp)
		if err != nil {
			return fmt.Errorf("bounding set: read %s: %w", capName(cp), err)
		}
		if bnd != slices.Contains(keep, capName(cp)) {
			return fmt.Errorf("bounding set: %s is %v after the drop", capName(cp), bnd)
		}
	}
	return nil
}
