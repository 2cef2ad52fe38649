package entry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// undoRefusedAdd takes back what stage0 did for an add that app/add then
// refused: rkt's stage0 has put the app in the pod manifest, written its
// -created marker and env file and rendered its rootfs before it runs
// app/add, and leaves all of it when app/add fails, so a refused app was
// listed as created and its name taken. The manifest entry goes first: once
// it is gone no app operation adopts the app (adoptHalfAdded) and rkt lists
// nothing, whatever of the rest an interruption leaves. pod1's own app add
// undoes the same on its side, every step of which finds nothing left. An
// app PID 1 has (an add of a name the pod already has) is left alone.
func undoRefusedAdd(name string) error {
	if _, err := types.NewACName(name); err != nil {
		return nil // stage0 made nothing under a name that is none
	}
	// PID 1 saves an app's spec first thing when it takes it in: an app
	// it has is one of the pod's, added before, and stays.
	if _, err := os.Lstat(layout.AppSpec(name)); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := dropFromPodManifest(name); err != nil {
		return err
	}
	podDir, err := os.Getwd()
	if err != nil {
		return err
	}
	appDir := filepath.Join(podDir, layout.AppDir(name))
	if err := unmountUnder(appDir); err != nil {
		return err
	}
	var dirs []string
	ov := ""
	if id, err := safefile.ReadRegularIn(".", layout.AppInfoTreeStoreID(name), 4096); err == nil {
		s := strings.TrimSpace(string(id))
		if s != "" && !strings.ContainsAny(s, "/") && s != "." && s != ".." {
			ov = filepath.Join("overlay", s)
			dirs = append(dirs, filepath.Join(ov, "upper", name), filepath.Join(ov, "work", name))
		}
	}
	dirs = append(dirs, layout.AppDir(name), layout.AppInfoDir(name))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	if ov != "" {
		// The image's overlay directory goes once no other app of
		// the pod uses it: a non-empty directory is not removed.
		for _, d := range []string{filepath.Join(ov, "upper"), filepath.Join(ov, "work"), ov} {
			_ = os.Remove(d)
		}
	}
	for _, f := range []string{
		filepath.Join(layout.StatusDir, name+layout.CreatedSuffix), filepath.Join(layout.StatusDir, name),
		layout.AppEnv(name),
	} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// dropFromPodManifest rewrites the pod manifest (the cwd's) without the
// app, atomically, as stage0 writes it.
func dropFromPodManifest(name string) error {
	b, err := safefile.ReadRegularIn(".", layout.PodManifest, layout.MaxFileSize)
	if err != nil {
		return fmt.Errorf("pod manifest: %w", err)
	}
	var pm schema.PodManifest
	if err := pm.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("pod manifest: %w", err)
	}
	keep := schema.AppList{}
	for _, a := range pm.Apps {
		if a.Name.String() != name {
			keep = append(keep, a)
		}
	}
	if len(keep) == len(pm.Apps) {
		return nil
	}
	pm.Apps = keep
	out, err := json.Marshal(&pm)
	if err != nil {
		return fmt.Errorf("pod manifest: %w", err)
	}
	return safefile.WriteIn(".", layout.PodManifest, out, 0o640, safefile.Durable)
}

// unmountUnder unmounts what stage0 mounted for the app (its overlay),
// deepest first, and fails if anything is left: nothing is removed
// through a live mount.
func unmountUnder(dir string) error {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	sort.Slice(infos, func(i, j int) bool { return len(infos[i].Mountpoint) > len(infos[j].Mountpoint) })
	for _, in := range infos {
		err := unix.Unmount(in.Mountpoint, unix.UMOUNT_NOFOLLOW)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			if err := unix.Unmount(in.Mountpoint, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
				return fmt.Errorf("unmount %s: %w", in.Mountpoint, err)
			}
		}
	}
	if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir)); err != nil || len(left) > 0 {
		return errors.Join(err, fmt.Errorf("mounts left under %s", dir))
	}
	return nil
}
