package pods

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podpid"
	"github.com/pod1/pod1/safefile"
)

// Read returns the pod with the full UUID uuid under dataDir (rkt's
// --dir), wherever it is in its lifecycle.
func Read(dataDir, uuid string) (*Pod, error) {
	return read(dataDir, uuid, Full)
}

func read(dataDir, uuid string, detail Detail) (*Pod, error) {
	// A pod moves between directories (run -> exited-garbage) while we
	// look; a second pass finds it where it went.
	for pass := 0; pass < 2; pass++ {
		for i := range stateDirs {
			p, err := readIn(dataDir, -1, &stateDirs[i], uuid, detail, nil)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return p, err
		}
	}
	return nil, fmt.Errorf("pod %s: %w", uuid, ErrNotFound)
}

// readIn reads the pod if it is in d; os.ErrNotExist when it is not.
// dfd, when not -1, is d open: the pod is opened below it. m, when not
// nil, is kept from pod to pod.
func readIn(dataDir string, dfd int, d *stateDir, uuid string, detail Detail, m *memo) (*Pod, error) {
	dir := filepath.Join(dataDir, layout.PodIn(d.name, uuid))
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	var fd int
	var err error
	if dfd >= 0 {
		fd, err = unix.Openat(dfd, uuid, flags, 0)
	} else {
		fd, err = unix.Open(dir, flags, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, os.ErrNotExist
		}
		return nil, fmt.Errorf("pod %s: open %s: %w", uuid, dir, err)
	}
	defer unix.Close(fd)
	p := &Pod{UUID: uuid, Dir: dir, State: d.unlocked}
	if !d.lockMeaningless {
		held, err := safefile.LockHeld(fd)
		if err != nil {
			return nil, fmt.Errorf("pod %s: lock test: %w", uuid, err)
		}
		if held {
			p.State = d.locked
		}
	}
	if m == nil {
		m = &memo{}
	}
	p.readAt(&podDir{fd: fd, m: m}, detail)
	return p, nil
}

// podDir is an open pod directory and the memo its files are read with.
type podDir struct {
	fd int
	m  *memo
}

// memo is what one List worker keeps from pod to pod: the buffer a pod's
// files are read into, and what it decoded of the manifests it saw, by
// their bytes. The pods of one image carry byte-identical image
// manifests, and pods run alike byte-identical pod manifests: each is
// decoded once. Decoding is a function of the bytes alone, so a hit gives
// what decoding them again would.
type memo struct {
	buf    []byte
	images map[string]string
	apps   map[string]memoApps
}

// memoApps is a pod manifest's apps as Summary reads them, up to the first
// one whose name is refused, and the error it ended with.
type memoApps struct {
	apps []appRef
	err  error
}

// Bounds of a memo: a manifest larger than memoMaxBytes is decoded every
// time, and past memoMaxEntries distinct ones nothing more is kept.
const (
	memoMaxBytes   = 16 << 10
	memoMaxEntries = 64
)

func memoable[V any](m map[string]V, b []byte) bool {
	return len(b) <= memoMaxBytes && len(m) < memoMaxEntries
}

// read reads a regular file of the pod directory without following a
// symlink and without blocking on a FIFO. The bytes are valid until the
// next read: every caller decodes them (copying what it keeps) at once.
func (d *podDir) read(name string) ([]byte, error) {
	b, err := safefile.ReadRegularAtInto(d.fd, name, layout.MaxFileSize, d.m.buf)
	switch {
	case errors.Is(err, safefile.ErrNotRegular):
		return nil, fmt.Errorf("%s: not a regular file", name)
	case errors.Is(err, safefile.ErrTooLarge):
		return nil, fmt.Errorf("%s: larger than %d bytes", name, layout.MaxFileSize)
	}
	if cap(b) > cap(d.m.buf) {
		d.m.buf = b[:0]
	}
	return b, err
}

// mtime returns a pod file's mtime, zero if it cannot be read.
func (d *podDir) mtime(name string) time.Time {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return time.Time{}
	}
	return time.Unix(st.Mtim.Unix())
}

// readAt fills in everything but the state from the open pod directory,
// or with Summary only what Summary names. Missing files are normal (a pod
// is read at every step of its life); other failures leave the field empty
// and, for the manifest, are kept in ManifestErr.
func (p *Pod) readAt(d *podDir, detail Detail) {
	if detail == Full {
		p.readStage1Layout(d)
	}
	if p.State == Prepared || p.State == Running || p.IsAfterRun() {
		p.Created = d.mtime(layout.PodCreated)
		if p.Created.IsZero() {
			// rkt before v1.20 had no pod-created.
			p.Created = d.mtime(layout.PodManifest)
		}
	}
	if p.State == Running || p.IsAfterRun() {
		for _, f := range []string{layout.Pid, layout.Ppid} {
			if t := d.mtime(f); !t.IsZero() {
				p.Started = t
				break
			}
		}
	}
	if detail == Summary {
		if p.State == Running || p.State == Exited {
			p.Networks = readNetworks(d)
		}
		p.readManifestAt(d, detail)
		return
	}
	p.Pid = pidAt(d, p.State)
	switch p.State {
	case Garbage, Deleting, ExitedGarbage, ExitedDeleting:
		var st unix.Stat_t
		if unix.Fstat(d.fd, &st) == nil {
			p.GCMarked = time.Unix(st.Ctim.Unix())
		}
	case Running, Exited:
		// rkt reads them for exited pods too: the networks stay set
		// up until gc.
		p.Networks = readNetworks(d)
	}
	p.readManifestAt(d, detail)
}

// readManifestAt reads the apps, or keeps why they cannot be read.
func (p *Pod) readManifestAt(d *podDir, detail Detail) {
	// rkt: the manifest may be missing while preparing or deleting.
	if p.State == Preparing || p.State == AbortedPrepare || p.State == Deleting || p.State == Embryo {
		if _, err := d.read(layout.PodManifest); err != nil {
			return
		}
	}
	if err := p.readManifest(d, detail); err != nil {
		p.ManifestErr = err
	}
}

// readStage1Layout finds where the stage1's files are on the host.
func (p *Pod) readStage1Layout(d *podDir) {
	p.statusDir = layout.StatusDir
	if b, err := d.read(layout.Stage1TreeStoreID); err == nil {
		p.Stage1TreeStoreID = strings.TrimSpace(string(b))
	}
	var st unix.Stat_t
	if unix.Fstatat(d.fd, layout.OverlayPrepared, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	p.Overlay = true
	id := p.Stage1TreeStoreID
	// The id names a directory: anything that could climb out of
	// overlay/ is not one stage0 wrote.
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return
	}
	p.statusDir = "overlay/" + id + "/upper/" + layout.StatusDirIn
}

// Stage1RootfsPath is where the stage1's own files are read from on the
// host: the overlay's upper directory for an overlay pod (rkt
// Pod.Stage1RootfsPath), stage1/rootfs otherwise.
func (p *Pod) Stage1RootfsPath() string {
	return filepath.Dir(filepath.Dir(p.StatusDir()))
}

// pidAt is the pid the pid file, or the ppid file, names (rkt Pod.Pid).
// Of a running pod it is shown only once podpid has checked that it is
// the pod's PID 1: the pod could have rewritten the file, and a pid shown
// as the pod's is one a reader may signal. Of a pod that has ended there
// is no process left to check, and its pid is history.
func pidAt(d *podDir, state State) int {
	if state == Running {
		pid1, err := podpid.OpenAt(d.fd)
		if err != nil {
			return 0
		}
		pid1.Close()
		return pid1.Pid
	}
	n, err := podpid.ReadAt(d.fd)
	if err != nil {
		return 0
	}
	return n
}

// fdPath names a path below an open directory for APIs that take paths;
// the magic link keeps resolving to the directory even after a rename.
func fdPath(fd int, rel string) string {
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + rel
}
