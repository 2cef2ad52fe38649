package pods

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// UUIDs returns the UUIDs of the pods in the included directories, sorted
// and without duplicates (a pod being renamed can be in two at once).
// Entries that are not directories named by a UUID are not pods and are
// left out, as rkt does.
func UUIDs(dataDir string, include Include) ([]string, error) {
	ls, err := listUUIDs(dataDir, include, nil)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.uuid
	}
	return out, nil
}

// listed is a pod's UUID and the first state directory (in stateDirs
// order, Read's) it was listed in.
type listed struct {
	uuid string
	dir  int
}

// listUUIDs lists the pods; with keep not nil, it keeps each state
// directory it listed open in keep[its index], for the caller to close.
func listUUIDs(dataDir string, include Include, keep []*os.File) ([]listed, error) {
	var out []listed
	for di, d := range stateDirs {
		if include&d.kind == 0 {
			continue
		}
		// Opened raw, and wrapped: an os.Open'd directory is offered
		// to the network poller, which then polls for nothing.
		path := filepath.Join(dataDir, layout.StateDir(d.name))
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list pods: open %s: %w", path, err)
		}
		f := os.NewFile(uintptr(fd), path)
		ents, err := f.ReadDir(-1)
		if keep != nil && err == nil {
			keep[di] = f
		} else {
			f.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() && layout.IsUUID(e.Name()) {
				out = append(out, listed{e.Name(), di})
			}
		}
	}
	// Sorted by UUID, then directory: of a pod listed twice, the entry
	// kept is the first directory's.
	slices.SortFunc(out, func(a, b listed) int {
		if c := strings.Compare(a.uuid, b.uuid); c != 0 {
			return c
		}
		return a.dir - b.dir
	})
	return slices.CompactFunc(out, func(a, b listed) bool { return a.uuid == b.uuid }), nil
}

// List reads every pod in the included directories, in UUID order, as
// much of each as detail says. A pod that moved to a directory not
// included between listing and reading is left out (rkt WalkPods); pods
// that cannot be read are reported in errs and the others are still
// returned.
func List(dataDir string, include Include, detail Detail) (pods []*Pod, errs []error) {
	errs = Each(dataDir, include, detail, func(p *Pod) { pods = append(pods, p) })
	return pods, errs
}

// eachChunk is how many pods a worker of Each takes at a time, and hands
// on together.
const eachChunk = 16

// Each is List handing each pod to fn, in UUID order, on the calling
// goroutine, as soon as it and the pods before it are read: the caller
// formats while the rest is read.
func Each(dataDir string, include Include, detail Detail, fn func(*Pod)) (errs []error) {
	// Each pod is opened below its state directory's descriptor: one
	// name to look up instead of the whole path, a thousand times.
	dirs := make([]*os.File, len(stateDirs))
	defer func() {
		for _, f := range dirs {
			if f != nil {
				f.Close()
			}
		}
	}()
	uuids, err := listUUIDs(dataDir, include, dirs)
	if err != nil {
		return []error{err}
	}
	dirfds := make([]int, len(stateDirs))
	for i, f := range dirs {
		dirfds[i] = -1
		if f != nil {
			dirfds[i] = int(f.Fd())
		}
	}
	got := make([]*Pod, len(uuids))
	gotErr := make([]error, len(uuids))
	// Reading is mostly waiting on the file system; a few workers cut a
	// list of a thousand pods several times over. They take pods from a
	// counter a chunk at a time and say which chunk they finished: a
	// hand-off every eachChunk pods, not every pod.
	chunks := (len(uuids) + eachChunk - 1) / eachChunk
	finished := make(chan int, chunks)
	var next atomic.Int64
	for w := 0; w < min(len(uuids), 2*runtime.GOMAXPROCS(0)); w++ {
		go func() {
			var m memo
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				for i := c * eachChunk; i < min((c+1)*eachChunk, len(uuids)); i++ {
					// Where it was listed first: the directories
					// before it in Read's order did not have it a
					// moment ago (three failed opens a pod saved).
					got[i], gotErr[i] = readIn(dataDir, dirfds[uuids[i].dir], &stateDirs[uuids[i].dir], uuids[i].uuid, detail, &m)
					if errors.Is(gotErr[i], os.ErrNotExist) || gotErr[i] == nil && got[i].ManifestErr != nil {
						// Moved on since (to garbage/), or read
						// while a collector removed it: look again
						// everywhere.
						got[i], gotErr[i] = read(dataDir, uuids[i].uuid, detail)
					}
				}
				finished <- c
			}
		}()
	}
	done := make([]bool, chunks)
	for c := 0; c < chunks; {
		done[<-finished] = true
		for ; c < chunks && done[c]; c++ {
			for i := c * eachChunk; i < min((c+1)*eachChunk, len(uuids)); i++ {
				switch p := got[i]; {
				case errors.Is(gotErr[i], ErrNotFound):
					// Deleted since it was listed.
				case gotErr[i] != nil:
					errs = append(errs, gotErr[i])
				case include&p.dirKind() != 0:
					fn(p)
				}
				got[i] = nil
			}
		}
	}
	return errs
}

// dirKind is the directory the pod was found in.
func (p *Pod) dirKind() Include {
	name := filepath.Base(filepath.Dir(p.Dir))
	for _, d := range stateDirs {
		if d.name == name {
			return d.kind
		}
	}
	return 0
}

// Resolve turns a UUID or a unique prefix of one into the full UUID, as
// rkt does: case-insensitively, among the pods in prepare/, prepared/,
// run/ and exited-garbage/.
func Resolve(dataDir, prefix string) (string, error) {
	prefix = strings.ToLower(prefix)
	if prefix == "" {
		return "", errors.New("empty UUID")
	}
	uuids, err := UUIDs(dataDir, IncludeMost)
	if err != nil {
		return "", err
	}
	var matches []string
	for _, u := range uuids {
		if strings.HasPrefix(u, prefix) {
			matches = append(matches, u)
		}
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("%w: no match for %q", ErrNotFound, prefix)
	case 1:
		return matches[0], nil
	}
	return "", fmt.Errorf("%w: %q matches %d pods", ErrAmbiguous, prefix, len(matches))
}
