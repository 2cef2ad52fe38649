package network

import (
	"os"
	"path/filepath"
	"regexp"
	"syscall"
)

// libcni's result cache is a directory of our own in the temporary
// directory, one per Setup or Teardown (see Teardown for why it is never
// one in the pod directory), named for the pod so that a net-setup killed
// before its deferred removal (SIGKILL at any step) leaves one the pod's
// Teardown (gc) finds and removes.

// cacheDirPrefix is the name of the pod uuid's cache directories, before
// os.MkdirTemp's random part.
func cacheDirPrefix(uuid string) string { return "pod1-cni-cache-" + uuid + "-" }

// plainUUID is what a UUID may hold to name a file: nothing a glob or a
// path would read as more than itself.
var plainUUID = regexp.MustCompile(`^[0-9a-fA-F-]{1,64}$`)

// removeLeftCaches removes the cache directories of the pod uuid that a
// killed Setup or Teardown left: directories of ours (not symlinks, not
// another user's) in the temporary directory, which anyone may write to.
func removeLeftCaches(uuid string) {
	if !plainUUID.MatchString(uuid) {
		return
	}
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), cacheDirPrefix(uuid)+"*"))
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		_ = os.RemoveAll(m)
	}
}
