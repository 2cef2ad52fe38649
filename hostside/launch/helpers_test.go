package launch

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

const (
	stage1Manifest = `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/pod1-stage1",
 "labels":[{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
 "annotations":[{"name":"coreos.com/rkt/stage1/run","value":"/run"},
                {"name":"coreos.com/rkt/stage1/interface-version","value":"5"}]}`
	helloManifest = `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/hello",
 "labels":[{"name":"version","value":"1.0"},{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
 "app":{"exec":["/bin/hello","img-arg"],"user":"0","group":"0",
        "environment":[{"name":"FOO","value":"image"},{"name":"KEEP","value":"k"}]}}`
	dirAppManifest = `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/dir.app",
 "labels":[{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
 "app":{"exec":["/bin/hello"],"user":"0","group":"0"}}`
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts overlays and chowns files")
	}
}

// file is one rootfs entry for test images: a regular file, or a symlink
// when link is set, or a directory when dir is set.
type file struct {
	path, body, link string
	mode             os.FileMode
	dir              bool
}

// makeACIDir creates an ACI directory at dir.
func makeACIDir(t *testing.T, dir, manifest string, files []file) string {
	t.Helper()
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p := filepath.Join(rootfs, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case f.dir:
			err = os.MkdirAll(p, 0o755)
		case f.link != "":
			err = os.Symlink(f.link, p)
		default:
			mode := f.mode
			if mode == 0 {
				mode = 0o644
			}
			err = os.WriteFile(p, []byte(f.body), mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// stage1Files is the runtime stage1's layout: run -> stage1-init, and the
// empty rkt/status and rkt/env directories.
func stage1Files(initBody string) []file {
	return []file{
		{path: "stage1-init", body: initBody, mode: 0o755},
		{path: "run", link: "stage1-init"},
		{path: "rkt/status", dir: true},
		{path: "rkt/env", dir: true},
	}
}

// makeACIFile writes a gzip-compressed ACI file from an ACI directory.
func makeACIFile(t *testing.T, srcDir, out string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := filepath.Walk(srcDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == srcDir {
			return err
		}
		rel, _ := filepath.Rel(srcDir, p)
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// cleanupMounts makes sure no test leaves a mount behind, even on failure.
// Registered after t.TempDir, it runs before the directory is removed.
func cleanupMounts(t *testing.T, dir string) {
	t.Cleanup(func() {
		if err := UnmountAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

func assertNoMounts(t *testing.T, dir string) {
	t.Helper()
	left, err := MountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("mounts left under %s: %v", dir, left)
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
	}
	return string(b)
}

// emptyDir reports whether dir has no entries (missing counts as empty).
func emptyDir(t *testing.T, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return len(ents) == 0
}
