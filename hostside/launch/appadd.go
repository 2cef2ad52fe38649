package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/appc/spec/schema"

	"github.com/pod1/pod1/hostside/images"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// RenderApp does stage0's part of `rkt app add` for the image of a: the
// image is opened (an ACI file unpacked into dataDir's store), and the app
// rendered into the running pod at podDir the way the pod's first apps
// were (overlay when the pod has overlay-prepared, else a copy), with its
// appsinfo/ entry. It returns the pod manifest entry to add. Nothing is
// written to the pod manifest: the caller does that last.
func RenderApp(podDir, dataDir string, a AppOptions) (*schema.RuntimeApp, error) {
	o := Options{Dir: dataDir}
	_, err := os.Stat(filepath.Join(podDir, layout.OverlayPrepared))
	o.NoOverlay = err != nil
	if b, err := safefile.ReadRegularIn(podDir, PrivateUsersFile, 4096); err == nil {
		u, err := idmap.Parse(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", PrivateUsersFile, err)
		}
		o.PrivateUsers = u
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	img, err := images.OpenLimited(a.Image, o.storeDir(), o.ImageLimits)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", a.Image, err)
	}
	if err := img.CheckApp(); err != nil {
		return nil, fmt.Errorf("image %s: %w", a.Image, err)
	}
	name, err := appName(a, img)
	if err != nil {
		return nil, err
	}
	ra, err := runtimeApp(name, img, a)
	if err != nil {
		return nil, err
	}
	p := &Prepared{Dir: podDir}
	pa := plannedApp{name: name, img: img}
	if err := prepareApp(p, pa, o); err != nil {
		return nil, fmt.Errorf("app %s: %w", name, err)
	}
	if !o.NoOverlay {
		if err := mountApp(p, pa); err != nil {
			return nil, fmt.Errorf("app %s: %w", name, err)
		}
	}
	return &ra, nil
}

// RemoveApp undoes RenderApp for app name, idempotently and whatever state
// an interrupted add or rm left: the app's overlay is unmounted (deepest
// mount first; nothing is removed through a live mount), then its upper
// and work dirs, appsinfo/ entry and stage1 directory are removed.
func RemoveApp(podDir, name string) error {
	if name == "" || strings.ContainsAny(name, "/.") {
		return fmt.Errorf("app name %q: %w", name, ErrEscape)
	}
	appDir := filepath.Join(podDir, layout.AppDir(name))
	points, err := MountsUnder(appDir)
	if err != nil {
		return err
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, mp := range points {
		if err := unmount(mp); err != nil {
			return err
		}
	}
	if left, err := MountsUnder(appDir); err != nil || len(left) > 0 {
		return errors.Join(err, fmt.Errorf("app %s: %w: %s", name, ErrMountsLeft, strings.Join(left, " ")))
	}
	var dirs []string
	ov := ""
	if id, err := safefile.ReadRegularIn(podDir, filepath.Join(layout.AppInfoDir(name), "treeStoreID"), 4096); err == nil {
		ov = filepath.Join(podDir, "overlay", strings.TrimSpace(string(id)))
		dirs = append(dirs, filepath.Join(ov, "upper", name), filepath.Join(ov, "work", name))
	}
	dirs = append(dirs, appDir, filepath.Join(podDir, layout.AppInfoDir(name)))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("app %s: remove %s: %w", name, d, err)
		}
	}
	if ov != "" {
		// The image's overlay dir goes too once no other app of the
		// pod uses it (os.Remove fails on a non-empty directory).
		for _, d := range []string{filepath.Join(ov, "upper"), filepath.Join(ov, "work"), ov} {
			_ = os.Remove(d)
		}
	}
	return nil
}
