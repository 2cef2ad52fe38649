package safefile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Errors of ReadRegularAt besides the open's (an *os.PathError).
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("file too large")
)

// ReadRegularAt reads the regular file name in the directory dirfd: never
// following a symlink at its last component (the open fails with ELOOP),
// never blocking on a FIFO, and refusing more than max bytes. It works on
// the raw descriptor: host tools read a few files of each of thousands of
// pods, and an *os.File costs an fcntl and a failed epoll registration
// per file on top of the open, stat, read and close.
func ReadRegularAt(dirfd int, name string, max int64) ([]byte, error) {
	return ReadRegularAtInto(dirfd, name, max, nil)
}

// ReadRegularAtInto is ReadRegularAt reading into buf when the file fits
// in its capacity: the result may then share buf's storage. For callers
// that read the files of a thousand pods one after another and keep none
// of the bytes, it saves an allocation a file.
func ReadRegularAtInto(dirfd int, name string, max int64, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	return readRegular(fd, name, max, buf)
}

// ReadRegularIn reads the regular file rel (a relative path) below the
// directory dir, as ReadRegularAt does, and also refuses a symlink at any
// component of rel and any path that leaves dir: the entry points read
// files of a pod directory that whoever ran the pod may have planted, and
// a FIFO there made them hang, a symlink read a file elsewhere.
func ReadRegularIn(dir, rel string, max int64) ([]byte, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.6: the last component is still checked.
		fd, err = unix.Openat(dfd, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	b, err := readRegular(fd, rel, max, nil)
	switch {
	case errors.Is(err, ErrNotRegular):
		return nil, fmt.Errorf("%s: %w", rel, err)
	case errors.Is(err, ErrTooLarge):
		return nil, fmt.Errorf("%s: %w: more than %d bytes", rel, err, max)
	}
	return b, err
}

func readRegular(fd int, name string, max int64, buf []byte) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, ErrNotRegular
	}
	if st.Size > max {
		return nil, ErrTooLarge
	}
	// One byte more than the size says, to see a file that grew.
	b := buf[:cap(buf)]
	if int64(len(b)) < st.Size+1 {
		b = make([]byte, st.Size+1)
	} else {
		b = b[:st.Size+1]
	}
	n := 0
	for n < len(b) {
		want := len(b) - n
		m, err := unix.Read(fd, b[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
		if int64(n) > max {
			return nil, ErrTooLarge
		}
		// A regular file's read returns less than asked only at its
		// end: a short read that ends where fstat said the file ends
		// is the whole file, and the read that would return 0 is
		// saved. A file that grew since fills the extra byte and is
		// read on; one that shrank is read until a read returns 0.
		if m < want && int64(n) == st.Size {
			break
		}
		if n == len(b) {
			b = append(b, make([]byte, len(b))...)
		}
	}
	return b[:n], nil
}

// LockHeld tests a pod directory's lock as rkt does (a pod is running
// while its directory's exclusive lock is held): a shared, non-blocking
// flock on our own open file description of it, fd, released at once.
func LockHeld(fd int) (bool, error) {
	err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
	switch {
	case err == nil:
		_ = unix.Flock(fd, unix.LOCK_UN)
		return false, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	}
	return false, err
}
