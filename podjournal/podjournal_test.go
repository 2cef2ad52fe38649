package podjournal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pod1/pod1/layout"
)

const uuid = "8862f4ff-4f09-4184-a8a0-ae8def8e47d0"

// The link is made where the host keeps a persistent journal, named after
// the pod's machine id, to the pod's journal directory; made again it is
// the same; gc's Unlink removes it and nothing else.
func TestLinkAndUnlink(t *testing.T) {
	host, pods := t.TempDir(), t.TempDir()
	podDir := filepath.Join(pods, "run", uuid)
	made, err := Link(host, podDir, uuid)
	if err != nil || !made {
		t.Fatalf("Link: %v, %v", made, err)
	}
	name := filepath.Join(host, layout.MachineID(uuid))
	if got, _ := os.Readlink(name); got != filepath.Join(podDir, "stage1/rootfs/var/log/journal", "8862f4ff4f094184a8a0ae8def8e47d0") {
		t.Errorf("link leads to %q", got)
	}
	if made, err := Link(host, podDir, uuid); err != nil || !made {
		t.Errorf("Link again: %v, %v", made, err)
	}
	// rkt's gc moves the pod before its stage1's gc runs.
	if err := Unlink(host, uuid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Unlink: %v", err)
	}
	if err := Unlink(host, uuid); err != nil {
		t.Errorf("Unlink of no link: %v", err)
	}
}

// What is not the pod's link is never replaced nor removed: a directory
// (the host's own journal, should its machine id be the pod's), a link
// elsewhere.
func TestOthersAreLeft(t *testing.T) {
	host, podDir := t.TempDir(), filepath.Join(t.TempDir(), uuid)
	name := filepath.Join(host, layout.MachineID(uuid))
	for _, make := range []func() error{
		func() error { return os.Mkdir(name, 0o755) },
		func() error { return os.Symlink("/etc", name) },
	} {
		_ = os.RemoveAll(name)
		if err := make(); err != nil {
			t.Fatal(err)
		}
		if made, err := Link(host, podDir, uuid); made || !errors.Is(err, ErrExists) {
			t.Errorf("Link over %s: %v, %v; want ErrExists", name, made, err)
		}
		if err := Unlink(host, uuid); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(name); err != nil {
			t.Errorf("Unlink removed what was not the pod's link: %v", err)
		}
	}
}

// Without a persistent journal there is nothing to link into.
func TestNoHostJournal(t *testing.T) {
	host := filepath.Join(t.TempDir(), "none")
	if made, err := Link(host, t.TempDir(), uuid); made || err != nil {
		t.Errorf("Link: %v, %v; want nothing made", made, err)
	}
	if err := Unlink(host, uuid); err != nil {
		t.Errorf("Unlink: %v", err)
	}
	if _, err := Link(t.TempDir(), t.TempDir(), "../../etc"); err == nil {
		t.Error("Link of a UUID that is a path: no error")
	}
}
