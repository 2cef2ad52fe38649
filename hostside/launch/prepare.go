package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/appc/spec/schema"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/entrypoint"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// Pod dir permissions and the pod state directories, as rkt creates them
// (pkg/pod/pods.go initPods, common.DefaultRegular{File,Dir}Perm).
const (
	dirPerm  = 0o750
	filePerm = 0o640
	lockPerm = 0o600
)

// Prepared is a pod directory in pods/run/<uuid>, locked and ready for its
// stage1 to be exec'd.
type Prepared struct {
	// UUID is the pod's UUID.
	UUID string
	// Dir is the pod directory's current absolute path.
	Dir string
	// Lock is the pod directory opened O_RDONLY|O_DIRECTORY|O_CLOEXEC with
	// flock(LOCK_EX) held; Exec hands it to the stage1 as RKT_LOCK_FD.
	Lock *os.File
	// Argv is the stage1 run command line, argv[0] first: the entry
	// point as its annotation names it in the pod's stage1 rootfs.
	Argv []string
	// Path is the file Exec executes: the entry point, every symlink on
	// its way resolved inside the stage1 rootfs.
	Path string
	// Env is the stage1's environment: the caller's plus RKT_LOCK_FD and
	// the (empty) SELinux contexts.
	Env []string
	// Manifest is the pod manifest written to Dir/pod.
	Manifest *schema.PodManifest

	// mounts are the overlay mount points made, relative to Dir, in
	// mount order; relative because the pod dir moves between states.
	mounts   []string
	uuidFile string // set once the --uuid-file-save file was written
	aborted  bool
}

// Prepare validates opts, creates and fills a pod directory the way rkt's
// stage0 does, and leaves it locked in pods/run/<uuid>. If anything fails,
// everything it did is undone (overlays unmounted, pod dir removed) before
// the error is returned; unpacked images stay in the store for reuse.
func Prepare(opts Options) (*Prepared, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// rkt's data dir layout first, so the image store (which creates its
	// parents 0700) does not decide the data dir's mode. Existing dirs are
	// not chmod'ed: `rkt install` gives them a setgid rkt group to keep.
	if err := os.MkdirAll(filepath.Join(o.Dir, layout.PodsDir), dirPerm); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	pl, err := makePlan(o)
	if err != nil {
		return nil, err
	}
	p, err := createPod(o)
	if err != nil {
		return nil, err
	}
	if err := fill(p, pl, o); err != nil {
		if aerr := Abort(p); aerr != nil {
			err = fmt.Errorf("%w (undo: %w)", err, aerr)
		}
		return nil, err
	}
	return p, nil
}

// createPod makes pods/embryo/<uuid>, locks it, stamps pod-created and
// moves it to pods/prepare/<uuid>, the sequence of rkt's pkg/pod NewPod and
// ToPreparing. The lock is taken while the dir is still an embryo, so no
// observer ever sees an unlocked prepare/<uuid> (which `rkt gc` would
// treat as an aborted prepare and delete).
func createPod(o Options) (p *Prepared, retErr error) {
	pods := filepath.Join(o.Dir, layout.PodsDir)
	for _, s := range layout.PodStates() {
		if err := os.MkdirAll(filepath.Join(pods, s), dirPerm); err != nil {
			return nil, fmt.Errorf("create pod state dir: %w", err)
		}
	}
	uuid, err := NewUUID()
	if err != nil {
		return nil, err
	}
	embryo := filepath.Join(pods, layout.PodsEmbryo, uuid)
	if err := os.Mkdir(embryo, dirPerm); err != nil {
		return nil, fmt.Errorf("create pod %s: %w", uuid, err)
	}
	p = &Prepared{UUID: uuid, Dir: embryo}
	defer func() {
		if retErr != nil {
			if aerr := Abort(p); aerr != nil {
				retErr = fmt.Errorf("%w (undo: %w)", retErr, aerr)
			}
		}
	}()
	if err := os.Chmod(embryo, dirPerm); err != nil {
		return nil, fmt.Errorf("pod %s: %w", uuid, err)
	}

	fd, err := unix.Open(embryo, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pod %s: open lock: %w", uuid, err)
	}
	p.Lock = os.NewFile(uintptr(fd), embryo)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("pod %s: lock: %w", uuid, err)
	}
	if err := writePodFile(filepath.Join(embryo, layout.PodCreated), nil, filePerm); err != nil {
		return nil, fmt.Errorf("pod %s: %w", uuid, err)
	}
	if err := p.move(filepath.Join(pods, layout.PodsPrepare, uuid)); err != nil {
		return nil, err
	}
	o.debugf("pod %s: preparing in %s", uuid, p.Dir)
	return p, nil
}

// move renames the pod dir to a new state. The lock follows the inode.
// The rename is not made durable here: a pod whose move to prepare/ is
// lost stays an embryo, which gc collects; fill makes the move into run/
// durable itself.
func (p *Prepared) move(to string) error {
	if err := os.Rename(p.Dir, to); err != nil {
		return fmt.Errorf("pod %s: move to %s: %w", p.UUID, to, err)
	}
	p.Dir = to
	return nil
}

// fill writes the pod's contents and moves the pod to pods/run/<uuid>. As
// in rkt, it happens in two halves: what stage0 Prepare does (files, and
// tree copies with --no-overlay) while the pod is in prepare/, then what
// stage0 Run does (overlay mounts, app manifests inside the stage1 rootfs)
// once it is in run/. Mounting after the move matters: overlayfs records
// its upper/work paths as given, and mountinfo would otherwise show
// prepare/ paths that no longer exist for the pod's whole life.
func fill(p *Prepared, pl *plan, o Options) error {
	for _, d := range []string{layout.AppsInfo, layout.Stage1Dir} {
		if err := mkdirMode(filepath.Join(p.Dir, d), dirPerm); err != nil {
			return fmt.Errorf("pod %s: %w", p.UUID, err)
		}
	}
	if err := prepareStage1(p, pl, o); err != nil {
		return fmt.Errorf("stage1: %w", err)
	}
	for _, a := range pl.apps {
		if err := prepareApp(p, a, o); err != nil {
			return fmt.Errorf("app %q: %w", a.name, err)
		}
	}
	if err := writePodFiles(p, pl, o); err != nil {
		return err
	}
	if o.UUIDFileSave != "" {
		if err := writeDurable(o.UUIDFileSave, []byte(p.UUID), 0o644); err != nil {
			return fmt.Errorf("--uuid-file-save: %w", err)
		}
		p.uuidFile = o.UUIDFileSave
	}

	// rkt skips prepared/ and goes straight to run/: this process owns
	// the pod and runs it at once. The move is made durable while the
	// overlays are mounted (the two directories' fsyncs wait on the disk,
	// the mounts on the CPU), and before fill returns: the stage1, which
	// writes the pod's statuses, is started only once it is.
	from := filepath.Dir(p.Dir)
	if err := p.move(filepath.Join(o.Dir, layout.PodIn(layout.PodsRun, p.UUID))); err != nil {
		return err
	}
	synced := make(chan error, 1)
	go func() { synced <- safefile.SyncDirs(from, filepath.Dir(p.Dir)) }()
	err := finish(p, pl, o)
	if serr := <-synced; serr != nil && err == nil {
		err = fmt.Errorf("pod %s: %w", p.UUID, serr)
	}
	return err
}

// finish is fill's second half, once the pod is in run/: the overlays,
// the files inside the stage1 rootfs, and the stage1's argv.
func finish(p *Prepared, pl *plan, o Options) error {
	if !o.NoOverlay {
		if err := mountStage1(p, pl); err != nil {
			return fmt.Errorf("stage1: %w", err)
		}
		for _, a := range pl.apps {
			if err := mountApp(p, a); err != nil {
				return fmt.Errorf("app %q: %w", a.name, err)
			}
		}
	}
	if err := writeResolvConf(p, o); err != nil {
		return err
	}
	if err := checkEntrypoint(p, pl); err != nil {
		return err
	}
	p.Argv = stage1Argv(filepath.Join(p.Dir, layout.Stage1RootFS, pl.entrypoint), o, pl.version, p.UUID)
	p.Env = stage1Env(os.Environ(), int(p.Lock.Fd()))
	o.debugf("pod %s: ready: %q", p.UUID, p.Argv)
	return nil
}

// PrivateUsersFile holds BASE:COUNT in a pod run with --private-users
// (rkt's name): apps added later are shifted the same way.
const PrivateUsersFile = "private-users-prepared"

// writePodFiles writes the top-level pod files.
func writePodFiles(p *Prepared, pl *plan, o Options) error {
	files := []podFile{
		{layout.PodManifest, pl.manifest, filePerm},
		// pod.lck is what `rkt app add/rm` flock to serialise manifest
		// rewrites; it must exist even though run never locks it.
		{layout.PodLock, nil, lockPerm},
	}
	if !o.NoOverlay {
		// Tells rkt gc / status / enter that the stage1 and app trees are
		// overlays whose upper dirs live under overlay/.
		files = append(files, podFile{layout.OverlayPrepared, nil, filePerm})
	}
	if o.PrivateUsers != nil {
		files = append(files, podFile{PrivateUsersFile, []byte(o.PrivateUsers.String()), filePerm})
	}
	// Only the pod manifest is made durable (last, so that its
	// directory's fsync also records the names of every file before it):
	// it is what status, list and rkt read of an exited pod.
	for _, f := range append(files[1:], files[0]) {
		write := writePodFile
		if f.name == layout.PodManifest {
			write = writeDurable
		}
		if err := write(filepath.Join(p.Dir, f.name), f.data, f.perm); err != nil {
			return fmt.Errorf("pod %s: %w", p.UUID, err)
		}
	}
	p.Manifest = pl.pm
	return nil
}

// checkEntrypoint fails early, while undo is simple, if the run entrypoint
// is missing from the pod's stage1 rootfs, not executable, or leads out of
// it; the file it resolves to is what Exec executes.
func checkEntrypoint(p *Prepared, pl *plan) error {
	file, err := entrypoint.In(filepath.Join(p.Dir, layout.Stage1RootFS), pl.entrypoint)
	if err != nil {
		return fmt.Errorf("stage1 run entrypoint %s: %w", pl.entrypoint, err)
	}
	p.Path = file
	return nil
}

// podFile is one top-level pod file written at the end of fill.
type podFile struct {
	name string
	data []byte
	perm os.FileMode
}

// Abort undoes a prepared pod: it unmounts the overlays, removes the pod
// directory and the --uuid-file-save file, and releases the lock. If any
// mount under the pod dir cannot be removed, the directory is kept: deleting
// through a live mount would reach into whatever is mounted there. Abort is
// safe to call more than once.
func Abort(p *Prepared) error {
	if p == nil || p.aborted {
		return nil
	}
	p.aborted = true
	var errs []error
	for i := len(p.mounts) - 1; i >= 0; i-- {
		if err := unmount(filepath.Join(p.Dir, p.mounts[i])); err != nil {
			errs = append(errs, err)
		}
	}
	p.mounts = nil
	// Belt and braces: nothing may stay mounted under a dir we delete.
	if err := UnmountAll(p.Dir); err != nil {
		errs = append(errs, err)
	} else if err := os.RemoveAll(p.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove pod %s: %w", p.UUID, err))
	}
	if p.uuidFile != "" {
		if err := os.Remove(p.uuidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove uuid file: %w", err))
		}
	}
	if p.Lock != nil {
		_ = p.Lock.Close()
	}
	return errors.Join(errs...)
}
