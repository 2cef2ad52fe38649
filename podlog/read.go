package podlog

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// Record is one line read back from a log file.
type Record struct {
	App     string
	Time    time.Time
	Stream  string
	Partial bool
	Line    []byte
}

// maxRead bounds one read of a log file: a file is capped at
// MaxFileSize by its writer, but the host reads what is there, which
// anything in the pod's directory could have replaced.
const maxRead = 2*MaxFileSize + lineMax

// OpenDir opens the pod's log directory without following a symlink;
// os.ErrNotExist when the pod logged to the journal (or nothing at all).
func OpenDir(podDir string) (int, error) {
	fd, err := unix.Open(filepath.Join(podDir, layout.LogDir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, os.ErrNotExist
	}
	return fd, err
}

// Apps lists the apps that have a log file in the directory dirfd.
func Apps(dirfd int) ([]string, error) {
	f, err := os.Open("/proc/self/fd/" + strconv.Itoa(dirfd))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var apps []string
	for _, n := range names {
		if a, ok := strings.CutSuffix(n, ".log"); ok && a != "" {
			apps = append(apps, a)
		}
	}
	sort.Strings(apps)
	return apps, nil
}

// Cursor is how far a follower has read one app's log.
type Cursor struct {
	ino    uint64
	offset int64
}

// ReadApp returns the complete records of app's log written since cur
// (from the start with a zero Cursor), the part that was rotated away
// included, and the cursor to read on from.
func ReadApp(dirfd int, app string, cur Cursor) ([]Record, Cursor, error) {
	var out []Record
	fd, st, err := openRegular(dirfd, FileName(app))
	if errors.Is(err, os.ErrNotExist) {
		return nil, cur, nil
	}
	if err != nil {
		return nil, cur, err
	}
	defer unix.Close(fd)
	if cur.ino != st.Ino {
		// Rotated since (or first read): the rest of the file we
		// were reading is the previous part now; a first read takes
		// the previous part whole.
		if ofd, ost, err := openRegular(dirfd, OldFileName(app)); err == nil {
			if cur.ino == 0 || ost.Ino == cur.ino {
				off := cur.offset
				if cur.ino == 0 {
					off = 0
				}
				recs, _, err := readRecords(ofd, app, off)
				unix.Close(ofd)
				if err != nil {
					return nil, cur, err
				}
				out = append(out, recs...)
			} else {
				unix.Close(ofd)
			}
		}
		cur = Cursor{ino: st.Ino}
	}
	recs, off, err := readRecords(fd, app, cur.offset)
	if err != nil {
		return nil, cur, err
	}
	cur.offset = off
	return append(out, recs...), cur, nil
}

func openRegular(dirfd int, name string) (int, *unix.Stat_t, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil, os.ErrNotExist
	}
	if err != nil {
		return -1, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, nil, errors.New(name + ": not a regular file")
	}
	return fd, &st, nil
}

// readRecords reads the complete lines of fd from off on; a line still
// being written stays for the next read.
func readRecords(fd int, app string, off int64) ([]Record, int64, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, off, err
	}
	f := os.NewFile(uintptr(dup), app)
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, off, maxRead))
	if err != nil {
		return nil, off, err
	}
	var out []Record
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return out, off, nil
		}
		if t, st, partial, line, ok := ParseRecord(b[:i]); ok {
			out = append(out, Record{App: app, Time: t, Stream: st, Partial: partial, Line: line})
		}
		b, off = b[i+1:], off+int64(i)+1
	}
}
