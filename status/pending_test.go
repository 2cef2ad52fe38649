package status

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/safefile"
)

// A pending final status is invisible under the app's name until
// CommitPending moves it there; it uses the app's reservation.
func TestWritePendingThenCommit(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Reserve("web", false); err != nil {
		t.Fatal(err)
	}
	if err := d.WritePending("web", 143); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Read("web"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pending status visible before its commit: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".web.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the reservation was not the file written: %v", err)
	}
	if err := d.Write("db", 0); err != nil {
		t.Fatal(err)
	}
	done, err := CommitPending(d.Fd(), []string{"web"})
	if err != nil || !slices.Equal(done, []string{"web"}) {
		t.Fatalf("CommitPending = %v, %v; want [web]", done, err)
	}
	if code, err := d.Read("web"); err != nil || code != 143 {
		t.Fatalf("committed status = %d, %v; want 143", code, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "web"+PendingSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pending name left after the commit: %v", err)
	}
	if done, err := CommitPending(d.Fd(), []string{"web"}); !errors.Is(err, os.ErrNotExist) || len(done) != 0 {
		t.Fatalf("second CommitPending = %v, %v; want nothing", done, err)
	}
}

// What is planted under a pending name is neither opened nor moved, even
// when it is named: a symlink (to a file the keeper could otherwise be
// made to fsync or expose under an app's name), a FIFO (whose open would
// block), a directory, a hard link and a file longer than a status.
func TestCommitPendingLeavesPlantedNames(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(target, []byte("7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link"+PendingSuffix)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"+PendingSuffix), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"+PendingSuffix), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"+PendingSuffix), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "other"), filepath.Join(dir, "hard"+PendingSuffix)); err != nil {
		t.Fatal(err)
	}
	// Not app names: a hidden one (a temp file's), the bare suffix.
	for _, n := range []string{".hidden" + PendingSuffix, PendingSuffix} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ok"+PendingSuffix), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	type result struct {
		done []string
		err  error
	}
	c := make(chan result, 1)
	go func() {
		done, err := CommitPending(d.Fd(), []string{"link", "fifo", "sub", "big", "hard", ".hidden", "", "ok"})
		c <- result{done, err}
	}()
	var r result
	select {
	case r = <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("CommitPending blocked (on the FIFO?)")
	}
	if !slices.Equal(r.done, []string{"ok"}) {
		t.Fatalf("committed %v, want [ok]", r.done)
	}
	if !errors.Is(r.err, safefile.ErrNotRegular) {
		t.Fatalf("planted names not reported: %v", r.err)
	}
	for _, n := range []string{"link", "fifo", "sub", "big", "hard", ".hidden", ""} {
		if _, err := os.Lstat(filepath.Join(dir, n)); n != "" && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q was moved to an app's name", n+PendingSuffix)
		}
		if _, err := os.Lstat(filepath.Join(dir, n+PendingSuffix)); err != nil {
			t.Errorf("%q: %v", n+PendingSuffix, err)
		}
	}
}

// Only the names asked for are committed, and a final status in place is
// never replaced: a pending status planted for an app whose status is
// final stays pending.
func TestCommitPendingOnlyNamedNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Write("done", 3); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"done", "ghost", "web"} {
		if err := os.WriteFile(filepath.Join(dir, n+PendingSuffix), []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done, err := CommitPending(d.Fd(), []string{"web", "done"})
	if !slices.Equal(done, []string{"web"}) || !errors.Is(err, ErrFinalInPlace) {
		t.Fatalf("CommitPending = %v, %v; want [web], %v", done, err, ErrFinalInPlace)
	}
	if code, err := d.Read("done"); err != nil || code != 3 {
		t.Fatalf("done's final status = %d, %v; want 3", code, err)
	}
	if _, err := d.Read("ghost"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a name not asked for was committed: %v", err)
	}
}
