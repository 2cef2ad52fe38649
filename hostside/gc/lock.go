package gc

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// errBusy means someone holds the pod's lock.
var errBusy = errors.New("pod is locked")

// podLock is a pod directory opened and exclusively locked by us.
type podLock struct{ fd int }

func (l *podLock) Close() { unix.Close(l.fd) }

// lockPod takes the pod directory's exclusive lock without waiting. A
// reader testing the lock (rkt status, pod1 list) holds a shared lock for
// a few microseconds, so a refusal is retried briefly before the pod is
// taken to be busy.
func lockPod(dir string) (*podLock, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, os.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	for try := 0; ; try++ {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &podLock{fd: fd}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || try == 4 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	unix.Close(fd)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, errBusy
	}
	return nil, fmt.Errorf("lock %s: %w", dir, err)
}

// stillAt reports whether the locked directory is still the one at path:
// between our listing and our lock, another collector may have moved it
// on, and a new directory can never take its name, but we check rather
// than assume.
func (l *podLock) stillAt(path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(l.fd, &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
