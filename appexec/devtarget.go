package appexec

import (
	"fmt"
	"slices"
	"strings"
)

// OnDev reports whether the clean absolute path p is the app's /dev or
// under it.
func OnDev(p string) bool { return p == "/dev" || strings.HasPrefix(p, "/dev/") }

// devReserved are the names of the app's /dev the stage1 makes (and
// /dev/console, /dev/log): no volume may cover them or anything below
// them, where the app would find something else than what every app
// finds there (a volume on /dev/pts would be another devpts; on /dev/fd,
// /dev/stdout, resolved through /proc, whatever the link led to).
var devReserved = []string{
	"null", "zero", "full", "random", "urandom", "tty", "ptmx",
	"fd", "stdin", "stdout", "stderr", "pts", "shm", "mqueue",
	"console", "log", maskName,
}

// DevTarget checks target, a clean absolute path on the app's /dev (OnDev),
// as a mount's: only a directory volume on /dev/shm itself (it then has
// that volume instead of the pod's /dev/shm), and a device volume (a host
// volume whose source is a device node, device) on a node of its own
// under /dev, as rkt's Documentation/block-devices.md mounts /dev/fuse.
// Anything else there would hide or fake what the stage1 puts in every
// app's /dev.
func DevTarget(target string, device, file bool) error {
	rel := strings.TrimPrefix(target, "/dev")
	switch {
	case rel == "":
		return fmt.Errorf("target %q is the app's /dev itself", target)
	case rel == "/shm":
		if device || file {
			return fmt.Errorf("target %q: only a directory volume may cover /dev/shm", target)
		}
		return nil
	case !device || !file:
		return fmt.Errorf("target %q is on /dev: only a host volume whose source is a device node may be mounted there (or a directory on /dev/shm)", target)
	}
	first, _, _ := strings.Cut(rel[1:], "/")
	if slices.Contains(devReserved, first) {
		return fmt.Errorf("target %q would cover the app's /dev/%s", target, first)
	}
	return nil
}
