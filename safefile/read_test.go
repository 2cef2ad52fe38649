package safefile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadRegularAt reads exactly the file, refuses one over its bound (by
// size or by growing while read) and anything not a regular file.
func TestReadRegularAt(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for name, size := range map[string]int{"none": 0, "small": 3, "max": 4096, "over": 4097} {
		if err := os.WriteFile(filepath.Join(dir, name), bytes.Repeat([]byte("x"), size), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := ReadRegularAt(fd, name, 4096)
		switch {
		case size > 4096:
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("%s: %d bytes, %v; want ErrTooLarge", name, len(b), err)
			}
		case err != nil || len(b) != size:
			t.Errorf("%s: %d bytes, %v; want %d", name, len(b), err, size)
		}
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRegularAt(fd, "fifo", 4096); !errors.Is(err, ErrNotRegular) {
		t.Errorf("fifo: %v", err)
	}
	if err := os.Symlink("small", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRegularAt(fd, "link", 4096); !errors.Is(err, unix.ELOOP) {
		t.Errorf("symlink: %v", err)
	}
}

// ReadRegularAtInto reads into the caller's buffer when the file fits,
// returns exactly the file (none of the buffer's old bytes) and is as
// strict as ReadRegularAt.
func TestReadRegularAtInto(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for name, content := range map[string]string{"short": "abc", "empty": "", "long": string(bytes.Repeat([]byte("y"), 300))} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	buf := bytes.Repeat([]byte("z"), 100)
	for _, c := range []struct {
		name, want string
		shared     bool
	}{{"short", "abc", true}, {"empty", "", true}, {"long", string(bytes.Repeat([]byte("y"), 300)), false}} {
		b, err := ReadRegularAtInto(fd, c.name, 4096, buf)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, b, err, c.want)
		}
		if shared := cap(b) > 0 && &b[:1][0] == &buf[0]; shared != c.shared {
			t.Errorf("%s: read into the caller's buffer %v, want %v", c.name, shared, c.shared)
		}
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRegularAtInto(fd, "fifo", 4096, buf); !errors.Is(err, ErrNotRegular) {
		t.Errorf("fifo: %v", err)
	}
	if err := os.Symlink("short", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRegularAtInto(fd, "link", 4096, buf); !errors.Is(err, unix.ELOOP) {
		t.Errorf("symlink: %v", err)
	}
	if _, err := ReadRegularAtInto(fd, "long", 299, buf); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the bound: %v", err)
	}
}
