// Package podjournal owns the pod's own journal on the host side: its
// directory in the stage1's rootfs (layout.PodJournalDir/<machine id>),
// which the run entry point makes and hands PID 1 open (PID 1 writes it
// with package journalfile), and the link into the host's
// /var/log/journal that rkt's stage1 made for journalctl -m, which gc
// removes.
//
// The link is the only thing of the host this package writes: it is made
// with symlinkat, which never replaces what is there, and removed only
// when it is a link to this pod's journal.
package podjournal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// Dir is the pod's journal directory, relative to the pod directory.
func Dir(uuid string) string {
	return filepath.Join(layout.PodJournalDir, layout.MachineID(uuid))
}

// Prepare makes the pod's journal directory in podDir (absolute) and
// returns an O_PATH descriptor of a detached copy of it, from which ".."
// leads nowhere: PID 1 holds it and nothing else of the host.
func Prepare(podDir, uuid string) (int, error) {
	if !layout.IsUUID(uuid) {
		return -1, fmt.Errorf("pod journal: %q is not a UUID", uuid)
	}
	dir := filepath.Join(podDir, Dir(uuid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return -1, fmt.Errorf("pod journal: %w", err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("pod journal: %s: %w", dir, err)
	}
	return fd, nil
}

// ErrExists means the host's journal has something of the pod's name
// that is not the pod's link: it is left as it is.
var ErrExists = errors.New("exists, and is not the pod's link")

// Link links the pod's journal directory into the host's persistent
// journal (hostDir, layout.HostJournalDir), as /var/log/journal/<machine
// id>, when the host has one; it reports whether it made the link. A link
// that is there already is ErrExists unless it is this pod's.
func Link(hostDir, podDir, uuid string) (bool, error) {
	if !layout.IsUUID(uuid) {
		return false, fmt.Errorf("pod journal: %q is not a UUID", uuid)
	}
	host, err := unix.Open(hostDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		// No persistent journal: journalctl -m has nothing to read
		// there, as with rkt's stage1.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pod journal link: %s: %w", hostDir, err)
	}
	defer unix.Close(host)
	name, target := layout.MachineID(uuid), filepath.Join(podDir, Dir(uuid))
	err = unix.Symlinkat(target, host, name)
	if errors.Is(err, unix.EEXIST) {
		if t, rerr := readlinkAt(host, name); rerr == nil && t == target {
			return true, nil
		}
		return false, fmt.Errorf("pod journal link: %s/%s %w", hostDir, name, ErrExists)
	}
	if err != nil {
		return false, fmt.Errorf("pod journal link: %s/%s: %w", hostDir, name, err)
	}
	return true, nil
}

// Unlink removes the pod's link from the host's journal (hostDir), if it
// is there and is a link to a pod journal directory of this machine id,
// wherever the pod directory was (it moves between rkt's pods/ states
// before gc; the link's target is where it was when the pod ran).
// Anything else of that name is left.
func Unlink(hostDir, uuid string) error {
	if !layout.IsUUID(uuid) {
		return fmt.Errorf("pod journal: %q is not a UUID", uuid)
	}
	host, err := unix.Open(hostDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pod journal link: %s: %w", hostDir, err)
	}
	defer unix.Close(host)
	name := layout.MachineID(uuid)
	t, err := readlinkAt(host, name)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
		return nil // none, or not a link
	}
	if err != nil {
		return fmt.Errorf("pod journal link: %s/%s: %w", hostDir, name, err)
	}
	if !strings.HasSuffix(t, "/"+Dir(uuid)) {
		return nil
	}
	// Unlinking a name removes the link itself, never what it leads to;
	// a name that was swapped for a directory meanwhile is refused.
	if err := unix.Unlinkat(host, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("pod journal link: %s/%s: %w", hostDir, name, err)
	}
	return nil
}

func readlinkAt(dir int, name string) (string, error) {
	b := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}
