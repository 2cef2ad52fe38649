package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"github.com/cyphar/filepath-securejoin/pathrs-lite/procfs"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/images"
	"github.com/pod1/pod1/layout"
)

// prepareStage1 writes stage1/manifest and stage1TreeStoreID and, with
// --no-overlay, copies the stage1 tree (rkt stage0 prepareStage1Image).
func prepareStage1(p *Prepared, pl *plan, o Options) error {
	s1 := pl.stage1
	if err := writePodFile(filepath.Join(p.Dir, layout.Stage1Manifest), s1.ManifestJSON, filePerm); err != nil {
		return err
	}
	if err := writePodFile(filepath.Join(p.Dir, layout.Stage1TreeStoreID), []byte(s1.TreeStoreID), filePerm); err != nil {
		return err
	}
	if !o.NoOverlay {
		return nil
	}
	o.debugf("pod %s: copying stage1 tree from %s", p.UUID, s1.Rootfs())
	return copyTree(s1.Rootfs(), filepath.Join(p.Dir, layout.Stage1RootFS), o.PrivateUsers)
}

// mountStage1 mounts the stage1 overlay (rkt stage0 setupStage1Image).
func mountStage1(p *Prepared, pl *plan) error {
	if err := mountOverlay(p, pl.stage1, "", filepath.Join(p.Dir, layout.Stage1Dir)); err != nil {
		return err
	}
	return touchStatusDir(filepath.Join(p.Dir, layout.Stage1RootFS))
}

// prepareApp writes appsinfo/<app>/ and, with --no-overlay, the app's
// directory in the stage1 rootfs with a copy of its tree (rkt stage0
// prepareAppImage).
func prepareApp(p *Prepared, a plannedApp, o Options) error {
	name := string(a.name)
	if err := mkdirMode(filepath.Join(p.Dir, layout.AppInfoDir(name)), dirPerm); err != nil {
		return err
	}
	if err := writePodFile(filepath.Join(p.Dir, layout.AppInfoManifest(name)), a.img.ManifestJSON, filePerm); err != nil {
		return err
	}
	if !o.NoOverlay {
		return writePodFile(filepath.Join(p.Dir, layout.AppInfoTreeStoreID(name)), []byte(a.img.TreeStoreID), filePerm)
	}
	appDir, err := stage2Dir(p, a)
	if err != nil {
		return err
	}
	o.debugf("pod %s: copying app %s tree from %s", p.UUID, a.name, a.img.Rootfs())
	if err := copyTree(a.img.Rootfs(), filepath.Join(appDir, layout.RootfsName), o.PrivateUsers); err != nil {
		return err
	}
	return ensureMtab(filepath.Join(appDir, layout.RootfsName))
}

// mountApp mounts an app's overlay inside the (mounted) stage1 rootfs
// (rkt stage0 setupAppImage).
func mountApp(p *Prepared, a plannedApp) error {
	appDir, err := stage2Dir(p, a)
	if err != nil {
		return err
	}
	if err := mountOverlay(p, a.img, string(a.name), appDir); err != nil {
		return err
	}
	return ensureMtab(filepath.Join(appDir, layout.RootfsName))
}

// stage2Dir creates stage1/rootfs/opt/stage2/<app>, writes the app's
// manifest there and returns the directory. The directories are created
// inside the stage1 rootfs by fd, and the result is checked to be where it
// should be: an image whose opt is a symlink to a host path must not make
// pod1 write manifests or mount overlays there.
func stage2Dir(p *Prepared, a plannedApp) (string, error) {
	rootPath := filepath.Join(p.Dir, layout.Stage1RootFS)
	root, err := os.OpenFile(rootPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open stage1 rootfs: %w", err)
	}
	defer root.Close()
	rel := filepath.Join(layout.Stage2DirIn, string(a.name))
	h, err := pathrs.MkdirAllHandle(root, rel, dirPerm)
	if err != nil {
		return "", fmt.Errorf("create %s in stage1 rootfs: %w", rel, err)
	}
	defer h.Close()
	want := filepath.Join(rootPath, rel)
	got, err := procfs.ProcSelfFdReadlink(h)
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", rel, err)
	}
	if got != want {
		return "", fmt.Errorf("stage1 rootfs %s is at %s: %w", rel, got, ErrEscape)
	}
	if err := writePodFile(filepath.Join(want, layout.ManifestName), a.img.ManifestJSON, filePerm); err != nil {
		return "", err
	}
	return want, nil
}

// touchStatusDir bumps the times of rkt/status in an overlaid stage1 rootfs,
// as rkt's stage0 does: that copies the directory up into the overlay's
// upper dir, where rkt status reads app exit codes from. A stage1 without
// rkt/status is left alone (pod1 assumes nothing beyond the run
// annotation). The lookup stays inside the rootfs.
func touchStatusDir(rootfs string) error {
	root, err := os.OpenFile(rootfs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open stage1 rootfs: %w", err)
	}
	defer root.Close()
	h, err := pathrs.OpenatInRoot(root, layout.StatusDirIn)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open rkt/status: %w", err)
	}
	defer h.Close()
	now := unix.NsecToTimeval(time.Now().UnixNano())
	if err := unix.Futimes(int(h.Fd()), []unix.Timeval{now, now}); err != nil {
		return fmt.Errorf("touch rkt/status: %w", err)
	}
	return nil
}

// ensureMtab adds etc/mtab -> ../proc/self/mounts to an app rootfs that has
// an etc directory but no mtab, as rkt's stage0 does (tools like mount and
// df read it). The app image is untrusted, so etc is resolved inside the
// rootfs and the link is created relative to that handle.
func ensureMtab(rootfs string) error {
	root, err := os.OpenFile(rootfs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open app rootfs: %w", err)
	}
	defer root.Close()
	etc, err := pathrs.OpenatInRoot(root, "etc")
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open etc: %w", err)
	}
	defer etc.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(etc.Fd()), &st); err != nil {
		return fmt.Errorf("stat etc: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	err = unix.Fstatat(int(etc.Fd()), "mtab", &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("stat etc/mtab: %w", err)
	}
	if err := unix.Symlinkat("../proc/self/mounts", int(etc.Fd()), "mtab"); err != nil {
		return fmt.Errorf("create etc/mtab: %w", err)
	}
	return nil
}

// imageRootMode returns the permission bits of an image's rootfs, which
// rkt gives to the directories that stand in for it (upper dir, copy).
func imageRootMode(img *images.Image) (os.FileMode, error) {
	fi, err := os.Stat(img.Rootfs())
	if err != nil {
		return 0, fmt.Errorf("image rootfs: %w", err)
	}
	return fi.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid), nil
}
