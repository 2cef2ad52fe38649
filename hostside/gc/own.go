package gc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podjournal"
)

// ownStage1BuildID is the Go build ID of the stage1-init binary built
// together with this pod1 (the Makefile sets it with -X). Empty: every pod's
// stage1 gc entry point is executed.
var ownStage1BuildID string

// ownStage1GC does the stage1 gc entry point's work in this process when
// the entry point is the stage1-init binary this pod1 was built with and
// the pod has no networks: it then only removes the pod's cgroups and its
// journal's link, the same code the entry point would run
// (cgroups.RemovePod, podjournal.Unlink), without the
// exec and Go start-up of the stage1 for every pod. It reports whether it
// applied; a pod with networks (whose teardown needs the stage1's plugins)
// or of any other stage1 has its entry point executed as rkt does.
//
// The binary is recognised by its Go build ID, a hash of its inputs and
// output: a stage1 of another build, even of the same name, is executed.
// This is no security boundary: the stage1 is code the host's root chose
// to run as root, and RemovePod refuses any cgroup not named for the pod.
func (c *collector) ownStage1GC(uuid, dir, entrypoint string) (bool, error) {
	if ownStage1BuildID == "" || hasNetworks(dir) || !c.isOwnStage1(entrypoint) {
		return false, nil
	}
	if c.o.Debug {
		c.logf("pod %s: stage1 gc done in process (stage1-init %s)", uuid, ownStage1BuildID)
	}
	if err := cgroups.RemovePod(dir, uuid); err != nil {
		return true, err
	}
	return true, podjournal.Unlink(layout.HostJournalDir, uuid)
}

// hasNetworks reports whether a pod has network state its stage1 gc
// tears down (the entry point's test, stage1-init/entry/gc.go).
func hasNetworks(dir string) bool {
	for _, name := range []string{layout.NetInfo, layout.Netns, layout.NetDir} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// fileKey identifies a file's content as long as it is not written: pods
// made from one stage1 tree share the entry point's inode (hard links,
// or an overlay's lower file once unmounted), so it is read once.
type fileKey struct {
	dev, ino, size uint64
	mtime, ctime   unix.Timespec
}

// ownCache remembers which entry point files are our stage1-init.
type ownCache struct {
	mu   sync.Mutex
	seen map[fileKey]bool
}

func (c *collector) isOwnStage1(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	k := fileKey{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim, ctime: st.Ctim}
	c.own.mu.Lock()
	own, ok := c.own.seen[k]
	c.own.mu.Unlock()
	if ok {
		return own
	}
	head := make([]byte, 4096)
	n, err := unix.Pread(fd, head, 0)
	if err != nil {
		return false
	}
	id, err := goBuildID(head[:n])
	own = err == nil && id == ownStage1BuildID
	c.own.mu.Lock()
	if c.own.seen == nil {
		c.own.seen = map[fileKey]bool{}
	}
	c.own.seen[k] = own
	c.own.mu.Unlock()
	return own
}

// errNoBuildID means the bytes are not the start of a Go ELF executable
// with its build ID note where the Go linker puts it (in the first page).
var errNoBuildID = errors.New("no Go build ID note")

// goBuildID reads the Go build ID note (name "Go", type 4) of a 64-bit
// little-endian ELF file from its first bytes. Only what lies inside head
// is read: a note elsewhere is not found.
func goBuildID(head []byte) (string, error) {
	le := binary.LittleEndian
	if len(head) < 64 || !bytes.Equal(head[:4], []byte("\x7fELF")) || head[4] != 2 || head[5] != 1 {
		return "", errNoBuildID
	}
	phoff, phentsize, phnum := le.Uint64(head[32:]), uint64(le.Uint16(head[54:])), uint64(le.Uint16(head[56:]))
	for i := uint64(0); i < phnum; i++ {
		off := phoff + i*phentsize
		if phentsize < 56 || off+56 > uint64(len(head)) {
			break
		}
		ph := head[off:]
		if le.Uint32(ph) != 4 { // PT_NOTE
			continue
		}
		noff, nsize := le.Uint64(ph[8:]), le.Uint64(ph[32:])
		if noff > uint64(len(head)) || nsize > uint64(len(head))-noff {
			continue
		}
		if id, ok := findGoNote(head[noff : noff+nsize]); ok {
			return id, nil
		}
	}
	return "", errNoBuildID
}

// findGoNote walks the notes of one PT_NOTE segment.
func findGoNote(notes []byte) (string, bool) {
	le := binary.LittleEndian
	align := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(notes) >= 12 {
		namesz, descsz, typ := uint64(le.Uint32(notes)), uint64(le.Uint32(notes[4:])), le.Uint32(notes[8:])
		rest := notes[12:]
		if align(namesz) > uint64(len(rest)) || align(namesz)+descsz > uint64(len(rest)) {
			return "", false
		}
		name, desc := rest[:namesz], rest[align(namesz):align(namesz)+descsz]
		if typ == 4 && bytes.Equal(bytes.TrimRight(name, "\x00"), []byte("Go")) {
			return string(desc), true
		}
		next := align(namesz) + align(descsz)
		if next > uint64(len(rest)) {
			return "", false
		}
		notes = rest[next:]
	}
	return "", false
}
