package images

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/safefile"
)

// knownDir holds, per ACI file already hashed, the identity of the file as
// it was hashed and its store key, so that a file that has not changed is
// not read and hashed again on every run: stage1.aci is tens of MB, and
// hashing it was most of what `pod1 run` adds to the stage1's own time.
const knownDir = ".known"

// racyWindow: a record is only kept for a file whose last change (ctime)
// was at least this long before we looked at it. The kernel stamps ctime
// from a coarse clock, so a write right after our fstat could leave ctime
// as it was; one that comes a whole window later cannot (git's "racily
// clean" rule). A file changed just before the run is hashed until it has
// been quiet that long.
var racyWindow = time.Second

// fileIdentity is what must be equal for a file to be the one hashed
// before. Any write changes ctime (which no user can set), so does a
// rename, a chmod or a new file reusing the inode number; size and mtime
// are kept too.
type fileIdentity struct {
	dev, ino, size uint64
	mtime, ctime   int64 // ns
}

func identityOf(f *os.File) (fileIdentity, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileIdentity{}, err
	}
	return fileIdentity{
		dev: st.Dev, ino: st.Ino, size: uint64(st.Size),
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}, nil
}

func (id fileIdentity) name() string { return fmt.Sprintf("%x-%x", id.dev, id.ino) }

func (id fileIdentity) record(storeID string) string {
	return fmt.Sprintf("%d %d %d %s\n", id.size, id.mtime, id.ctime, storeID)
}

// knownStoreID returns the store key recorded for this very file, if any.
// A missing, unreadable or malformed record is no answer: the file is
// hashed.
func knownStoreID(storeDir string, id fileIdentity) (string, bool) {
	b, err := os.ReadFile(filepath.Join(storeDir, knownDir, id.name()))
	if err != nil || len(b) > 256 {
		return "", false
	}
	f := strings.Fields(string(b))
	if len(f) != 4 || f[0] != strconv.FormatUint(id.size, 10) ||
		f[1] != strconv.FormatInt(id.mtime, 10) || f[2] != strconv.FormatInt(id.ctime, 10) {
		return "", false
	}
	key := f[3]
	if len(key) != keyHexLen || strings.Trim(key, "0123456789abcdef") != "" {
		return "", false
	}
	return key, true
}

// rememberStoreID records the file's store key, unless the file changed too
// recently to be told apart from a later write (racyWindow). The record is
// a cache: it is written to a temporary name and renamed, never fsync'd
// (lost in a crash, the file is hashed again), and failing to write it
// changes nothing.
func rememberStoreID(storeDir string, id fileIdentity, storeID string, now time.Time) {
	if now.UnixNano()-id.ctime < int64(racyWindow) {
		return
	}
	dir := filepath.Join(storeDir, knownDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	_ = safefile.WriteIn(dir, id.name(), []byte(id.record(storeID)), 0o600, safefile.Volatile)
}
