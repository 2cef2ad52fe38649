package launch

import (
	"crypto/rand"
	"fmt"
	"os"

	"github.com/pod1/pod1/safefile"
)

// NewUUID returns a random (version 4) UUID in lower-case canonical form,
// the form rkt uses for pod directory names.
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate uuid: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// writeDurable writes a file a crash must not lose (the pod manifest, the
// caller's --uuid-file-save): atomically, the file and its directory
// fsync'd (safefile).
func writeDurable(path string, data []byte, perm os.FileMode) error {
	return safefile.WriteFile(path, data, perm, safefile.Durable)
}

// writePodFile writes a file of a pod being prepared atomically, without
// the fsyncs: readers see the old file or the whole new one, but a crash
// may lose it (docs/hostside.md, "What a crash can lose").
func writePodFile(path string, data []byte, perm os.FileMode) error {
	return safefile.WriteFile(path, data, perm, safefile.Volatile)
}

// mkdirMode creates dir (and missing parents) and then sets its mode
// exactly: MkdirAll's mode is filtered by the umask, and rkt's modes (pod
// dirs 0750, upper dirs = image rootfs mode) must not depend on the
// caller's umask.
func mkdirMode(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}
