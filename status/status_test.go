package status

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFromWaitStatusAllCodes(t *testing.T) {
	for code := 0; code < 256; code++ {
		ws := unix.WaitStatus(code << 8)
		if got := FromWaitStatus(ws); got != code {
			t.Fatalf("exit %d recorded as %d", code, got)
		}
	}
	for _, sig := range []unix.Signal{unix.SIGKILL, unix.SIGTERM, unix.SIGSEGV, unix.SIGINT} {
		ws := unix.WaitStatus(sig)
		if got, want := FromWaitStatus(ws), 128+int(sig); got != want {
			t.Fatalf("signal %d recorded as %d, want %d", sig, got, want)
		}
	}
}

func TestParseStrict(t *testing.T) {
	good := map[string]int{"0\n": 0, "255\n": 255, "137\n": 137, "-1\n": -1}
	for in, want := range good {
		got, err := Parse([]byte(in))
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", "1", "1\n\n", " 1\n", "1 \n", "x\n", "12345678901234\n"} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) accepted: %v", in, err)
		}
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Read("web"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing status read as %v", err)
	}
	for _, code := range []int{0, 3, 255, 143} {
		if err := d.Write("web", code); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "web"))
		if string(b) != string(Format(code)) {
			t.Fatalf("file holds %q", b)
		}
		if got, err := Read(dir, "web"); err != nil || got != code {
			t.Fatalf("Read = %d, %v", got, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
}

// T-STATUS-1: symlinks planted at the status path and at the temp path are
// replaced, never followed.
func TestWriteDoesNotFollowPlantedSymlinks(t *testing.T) {
	dir := t.TempDir()
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"web", ".web.tmp"} {
		if err := os.Symlink(canary, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Write("web", 7); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(canary); string(b) != "precious" {
		t.Fatalf("canary changed: %q", b)
	}
	st, err := os.Lstat(filepath.Join(dir, "web"))
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("status is not a regular file: %v %v", st, err)
	}
	if got, _ := d.Read("web"); got != 7 {
		t.Fatalf("read %d", got)
	}
}

func TestReadRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]func(p string) error{
		"empty":   func(p string) error { return os.WriteFile(p, nil, 0o644) },
		"garbage": func(p string) error { return os.WriteFile(p, []byte("ok\n"), 0o644) },
		"symlink": func(p string) error { return os.Symlink("/etc/hostname", p) },
		"fifo":    func(p string) error { return unix.Mkfifo(p, 0o644) },
		"dir":     func(p string) error { return os.Mkdir(p, 0o755) },
	}
	for name, mk := range cases {
		if err := mk(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if code, err := Read(dir, name); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: read %d, %v; want ErrMalformed", name, code, err)
		}
	}
}

func TestOpenDirRefusesSymlink(t *testing.T) {
	base := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(base, "status")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(filepath.Join(base, "status")); err == nil {
		t.Fatal("a symlinked status dir was opened")
	}
}
