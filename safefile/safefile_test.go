package safefile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteFileReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, sync := range []Sync{Durable, Volatile} {
		if err := WriteFile(p, []byte("one"), 0o640, sync); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(p, []byte("two"), 0o644, sync); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != "two" {
			t.Fatalf("content %q, %v", got, err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
			t.Errorf("mode %v, want 0644 whatever the umask", fi.Mode())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}

	// A failed write leaves neither the target nor a temporary file: the
	// target is a non-empty directory, so the rename fails.
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "target", "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(sub, "target"), []byte("x"), 0o644, Durable); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	if ents, _ := os.ReadDir(sub); len(ents) != 1 || ents[0].Name() != "target" {
		t.Errorf("after failure %s holds %v", sub, ents)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), nil, 0o644, Durable); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

// A symlink planted at the target or at the reservation's name is
// replaced or ignored, never followed.
func TestWriteNeverFollowsPlantedSymlinks(t *testing.T) {
	dir := t.TempDir()
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"f", ".f.tmp"} {
		if err := os.Symlink(canary, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WriteReserved("f", []byte("new"), 0o644, Durable); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(canary); string(b) != "precious" {
		t.Fatalf("canary changed: %q", b)
	}
	if st, err := os.Lstat(filepath.Join(dir, "f")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("target is not a regular file: %v %v", st, err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteIn(link, "g", nil, 0o644, Volatile); err == nil {
		t.Error("WriteIn followed a symlinked directory")
	}
}

// A reservation is filled in place (its blocks were allocated up front),
// then gone; a write without one still works.
func TestReserve(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Reserve("f", 4096); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, ".f.tmp"))
	if err != nil || st.Sys().(*syscall.Stat_t).Blocks == 0 {
		t.Fatalf("reservation %v, %v: no blocks", st, err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	if err := d.WriteReserved("f", []byte("abc"), 0o644, Volatile); err != nil {
		t.Fatal(err)
	}
	st, err = os.Stat(filepath.Join(dir, "f"))
	if err != nil || st.Size() != 3 || st.Sys().(*syscall.Stat_t).Ino != ino {
		t.Fatalf("written %v, %v: not the reservation, truncated to the data", st, err)
	}
	if err := d.WriteReserved("f", []byte("de"), 0o644, Durable); err != nil {
		t.Fatal(err)
	}
	if err := d.Reserve("g", 64); err != nil {
		t.Fatal(err)
	}
	d.Unreserve("g")
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

// Symlink replaces what is there (a file, a planted symlink to a file
// elsewhere) with the link itself, never writing through the old one, and
// leaves no temp name behind.
func TestSymlinkReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "status")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for range 2 {
		if err := d.Symlink("status", "ready"); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(filepath.Join(dir, "status")); err != nil || got != "ready" {
			t.Fatalf("link = %q, %v; want ready", got, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("the planted link's target changed: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left in the directory: %v", ents)
	}
}
