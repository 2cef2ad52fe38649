package launch

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/images"
	"github.com/pod1/pod1/layout"
)

// mountOverlay mounts an overlay of img's rootfs on dest/rootfs with upper
// and work dirs under <pod>/overlay/<treeStoreID>/, laid out as rkt's stage0
// prepareOverlay does (app == "" for the stage1; apps get upper/<app> and
// work/<app> so two apps from one image share the image dir but nothing
// else). The mount lives in the host mount namespace, as rkt's does, and is
// recorded so Abort can undo it.
func mountOverlay(p *Prepared, img *images.Image, app, dest string) error {
	mode, err := imageRootMode(img)
	if err != nil {
		return err
	}
	target := filepath.Join(dest, layout.RootfsName)
	if err := mkdirMode(target, mode); err != nil {
		return err
	}
	// rkt chmods overlay/ explicitly so it does not inherit a setgid bit
	// from a data dir set up by `rkt install`; files apps create would
	// otherwise inherit the rkt group.
	overlayDir := filepath.Join(p.Dir, "overlay")
	if err := mkdirMode(overlayDir, dirPerm); err != nil {
		return err
	}
	imgDir := filepath.Join(overlayDir, img.TreeStoreID)
	if err := mkdirMode(imgDir, dirPerm); err != nil {
		return err
	}
	upper := filepath.Join(imgDir, "upper", app)
	work := filepath.Join(imgDir, "work", app)
	// The upper dir's mode is what the overlay root shows, so it must be
	// the image rootfs's mode, not ours.
	if err := mkdirMode(upper, mode); err != nil {
		return err
	}
	if err := mkdirMode(work, dirPerm); err != nil {
		return err
	}
	lower := img.Rootfs()
	for _, d := range []string{lower, upper, work} {
		if strings.ContainsAny(d, `,:\`) {
			return fmt.Errorf("overlay dir %q: %w", d, ErrOverlayPath)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay on %s (lower %s): %w (the data dir may not support overlayfs; try --no-overlay)", target, lower, err)
	}
	rel, err := filepath.Rel(p.Dir, target)
	if err != nil {
		// Cannot happen for a path built from p.Dir; unmount rather than
		// leave an untracked mount behind.
		_ = unmount(target)
		return fmt.Errorf("overlay target %s: %w", target, err)
	}
	p.mounts = append(p.mounts, rel)
	return nil
}

// unmount removes one mount. If it is busy, it is detached instead: the
// pod never ran, so nothing legitimate still uses it.
func unmount(target string) error {
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // EINVAL: not a mount point (any more)
	}
	if derr := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); derr != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// UnmountAll unmounts every mount at or below dir, deepest first, as found
// in /proc/self/mountinfo. It returns ErrMountsLeft if any remain, so
// callers never delete a directory through a live mount. Future pod1 gc
// uses this for the overlays a finished pod leaves behind, as rkt gc does.
func UnmountAll(dir string) error {
	dir = filepath.Clean(dir)
	points, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	// Deepest first: a mount inside another keeps the outer one busy.
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := unmount(mp); err != nil {
			errs = append(errs, err)
		}
	}
	left, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("%s: %w: %s", dir, ErrMountsLeft, strings.Join(left, " ")))
	}
	return errors.Join(errs...)
}

// MountsUnder lists the mount points at or below dir in this process's
// mount namespace (several entries if something is mounted twice).
func MountsUnder(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	out := make([]string, 0, len(infos))
	for _, in := range infos {
		out = append(out, in.Mountpoint)
	}
	return out, nil
}
