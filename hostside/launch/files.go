package launch

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
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

// WriteFileAtomic writes data to path so that a reader (rkt, the stage1,
// pod1's own tools) sees either the old file or the complete new one, never
// a prefix: it writes a temporary file in the same directory, fsyncs it,
// renames it over path and fsyncs the directory. perm is applied with
// fchmod, so the umask does not change it.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, data, perm, true)
}

// writePodFile is WriteFileAtomic without the fsyncs, for the files of a
// pod being prepared: readers still see the old file or the whole new one,
// but a crash may lose it (docs/hostside.md, "What a crash can lose").
func writePodFile(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, data, perm, false)
}

// fsynced is told of every file and directory fsync'd; tests count them.
var fsynced = func(string) {}

func writeFile(path string, data []byte, perm os.FileMode, durable bool) (retErr error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if retErr != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		fsynced(path)
		if err := f.Sync(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	return syncDir(dir)
}

// syncDir makes renames and creations in dir durable.
func syncDir(dir string) error {
	fsynced(dir)
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
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
