package gc

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// ErrMountsLeft means mounts under a pod could not all be removed; the pod
// is then kept, never removed through them.
var ErrMountsLeft = errors.New("mounts remain under the pod")

// mount is one line of /proc/self/mountinfo.
type mount struct {
	point      string
	propagates bool // shared or slave: an unmount would travel
}

// readMounts lists this mount namespace's mounts.
func readMounts() ([]mount, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	out := make([]mount, 0, len(infos))
	for _, in := range infos {
		m := mount{point: in.Mountpoint}
		for _, opt := range strings.Fields(in.Optional) {
			if strings.HasPrefix(opt, "shared:") || strings.HasPrefix(opt, "master:") {
				m.propagates = true
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// under returns the mounts at or below dir, deepest first: a mount inside
// another keeps the outer one busy.
func under(all []mount, dir string) []mount {
	var out []mount
	for _, m := range all {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].point, "/") > strings.Count(out[j].point, "/")
	})
	return out
}

// unmountUnder removes every mount at or below dir and checks that none is
// left. known is a mountinfo read made after the pod was locked.
func unmountUnder(dir string, known []mount) error {
	ms := under(known, dir)
	if len(ms) == 0 {
		return nil
	}
	var errs []error
	for _, m := range ms {
		if m.propagates {
			// As rkt's MountGC: unmounting a shared mount would also
			// unmount its peers elsewhere.
			_ = unix.Mount("", m.point, "", unix.MS_PRIVATE, "")
		}
		err := unix.Unmount(m.point, unix.UMOUNT_NOFOLLOW)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			continue // EINVAL: not a mount point any more
		}
		// Busy: something (a leftover process, a shell cd'ed in)
		// still uses it. Detaching makes it unreachable from the
		// pod's path, which is all removal needs; the kernel frees it
		// when the last user goes.
		if derr := unix.Unmount(m.point, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); derr != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.point, err))
		}
	}
	again, err := readMounts()
	if err != nil {
		return err
	}
	if left := under(again, dir); len(left) > 0 {
		points := make([]string, len(left))
		for i, m := range left {
			points[i] = m.point
		}
		errs = append(errs, fmt.Errorf("%w: %s", ErrMountsLeft, strings.Join(points, " ")))
	}
	return errors.Join(errs...)
}
