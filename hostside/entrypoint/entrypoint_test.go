package entrypoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pod1/pod1/layout"
)

func write(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// An entry point is what its annotation declares, found inside the
// stage1 rootfs; whatever leads out of the rootfs (the annotation, or a
// symlink on the way, absolute or climbing) never resolves to a host file.
func TestResolveStaysInTheRootfs(t *testing.T) {
	root := filepath.Join(t.TempDir(), "rootfs")
	host := t.TempDir()
	write(t, filepath.Join(host, "evil"), 0o755)
	write(t, filepath.Join(root, "stage1-init"), 0o755)
	write(t, filepath.Join(root, "data"), 0o644)
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "stage1-init", filepath.Join(root, "stop"))
	symlink(t, filepath.Join(host, "evil"), filepath.Join(root, "abs"))
	symlink(t, "../../../../../../.."+filepath.Join(host, "evil"), filepath.Join(root, "climb"))
	symlink(t, "/", filepath.Join(root, "up"))

	s1 := New(map[string]string{
		layout.AnnStop: "/stop", layout.AnnRun: "run/../../x", layout.AnnGC: "/abs", layout.AnnEnter: "climb",
		layout.AnnAppAdd: "/data", layout.AnnAppRm: "/dir", layout.AnnAppStart: "/up" + filepath.Join(host, "evil"),
	})
	file, argv0, err := s1.Resolve(layout.AnnStop, root)
	if err != nil || file != filepath.Join(root, "stage1-init") || argv0 != filepath.Join(root, "stop") {
		t.Errorf("stop: %q %q %v; want the file the symlink names in the rootfs and argv[0] %s/stop", file, argv0, err, root)
	}
	if _, _, err := s1.Resolve(layout.AnnRun, root); !errors.Is(err, ErrEscape) {
		t.Errorf("an annotation climbing out of the rootfs: %v, want ErrEscape", err)
	}
	for _, ann := range []string{layout.AnnGC, layout.AnnEnter, layout.AnnAppStart} {
		if file, _, err := s1.Resolve(ann, root); err == nil {
			t.Errorf("%s: resolved to %s, want a refusal: it leads out of the rootfs", Name(ann), file)
		}
	}
	for _, ann := range []string{layout.AnnAppAdd, layout.AnnAppRm} {
		if _, _, err := s1.Resolve(ann, root); !errors.Is(err, ErrNotExecutable) {
			t.Errorf("%s: %v, want ErrNotExecutable", Name(ann), err)
		}
	}
	if _, _, err := s1.Resolve(layout.AnnAttach, root); !errors.Is(err, ErrNotDeclared) {
		t.Errorf("an entry point without its annotation: %v, want ErrNotDeclared", err)
	}
}

func TestParseAndVersion(t *testing.T) {
	s1, err := Parse([]byte(`{"annotations":[{"name":"coreos.com/rkt/stage1/gc","value":"/gc"},{"name":"coreos.com/rkt/stage1/interface-version","value":"5"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s1.Path(layout.AnnGC); p != "/gc" || err != nil {
		t.Errorf("gc: %q %v", p, err)
	}
	if v, err := s1.Version(); v != 5 || err != nil {
		t.Errorf("version: %d %v", v, err)
	}
	if v, err := New(nil).Version(); v != 1 || err != nil {
		t.Errorf("no version: %d %v, want 1", v, err)
	}
	if _, err := New(map[string]string{layout.AnnInterfaceVersion: "0"}).Version(); err == nil {
		t.Error("version 0 accepted")
	}
	if _, err := Parse([]byte("{")); err == nil {
		t.Error("a broken manifest parsed")
	}
}
