package podspec

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// maxDBSize caps what is read of an image's /etc/passwd or /etc/group.
const maxDBSize = 1 << 20

// openInRoot opens p inside root with every symlink resolved inside root,
// so an image's /etc/passwd -> /etc/passwd reads the image's own file, never
// the host's (containerd #1429, threats T16). The result is an O_PATH
// handle.
func openInRoot(root, p string) (*os.File, error) {
	return pathrs.OpenInRoot(root, p)
}

func isDirInRoot(root, p string) error {
	h, err := openInRoot(root, p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, unwrapPath(err))
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", p)
	}
	return nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readDB reads an account database of the image: a regular file (a FIFO or
// /dev/zero in its place would hang or exhaust us, CVE-2024-9676), at most
// maxDBSize bytes.
func readDB(root, p string) ([]byte, error) {
	h, err := openInRoot(root, p)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s in the image is not a regular file", p)
	}
	f, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDBSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDBSize {
		return nil, fmt.Errorf("%s in the image exceeds %d bytes", p, maxDBSize)
	}
	return b, nil
}

// lookupDB finds name in a passwd- or group-format database and returns
// its third field (the uid or gid).
func lookupDB(root, db, name string) (int, error) {
	// rkt's words ("NAME" user not found), which its users' scripts and
	// rkt's own tests look for.
	kind := "user"
	if db == "/etc/group" {
		kind = "group"
	}
	b, err := readDB(root, db)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%q %s not found: the image has no %s", name, kind, db)
	}
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxDBSize)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || f[0] != name {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil || id < 0 {
			return 0, fmt.Errorf("%s: entry %q has an invalid id %q", db, name, f[2])
		}
		return id, nil
	}
	return 0, fmt.Errorf("%q %s not found in the image's %s", name, kind, db)
}

// resolveID handles the forms common to user and group (contract §5):
// empty or "root" is 0, a number is itself, an absolute path is the owner
// of that file inside the image.
func resolveID(root, v string, owner func(*unix.Stat_t) int) (int, bool, error) {
	switch {
	case v == "" || v == "root":
		return 0, true, nil
	case strings.HasPrefix(v, "/"):
		h, err := openInRoot(root, v)
		if err != nil {
			return 0, true, fmt.Errorf("%s: %w", v, unwrapPath(err))
		}
		defer h.Close()
		var st unix.Stat_t
		if err := unix.Fstat(int(h.Fd()), &st); err != nil {
			return 0, true, err
		}
		return owner(&st), true, nil
	}
	if id, err := strconv.Atoi(v); err == nil {
		if id < 0 || id > 0xfffffffe {
			return 0, true, fmt.Errorf("id %d out of range", id)
		}
		return id, true, nil
	}
	return 0, false, nil
}

func resolveUser(root, user string) (int, error) {
	id, done, err := resolveID(root, user, func(st *unix.Stat_t) int { return int(st.Uid) })
	if done {
		return id, err
	}
	return lookupDB(root, "/etc/passwd", user)
}

func resolveGroup(root, group string) (int, error) {
	id, done, err := resolveID(root, group, func(st *unix.Stat_t) int { return int(st.Gid) })
	if done {
		return id, err
	}
	return lookupDB(root, "/etc/group", group)
}
