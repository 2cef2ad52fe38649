package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testManifest = `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"example.com/hello",
 "labels":[{"name":"os","value":"linux"},{"name":"arch","value":"amd64"}],
 "app":{"exec":["/hello"],"user":"0","group":"0"}}`

func helloEntries() []entry {
	return []entry{
		{name: "manifest", typ: tar.TypeReg, body: testManifest},
		{name: "rootfs/", typ: tar.TypeDir},
		{name: "rootfs/hello", typ: tar.TypeReg, body: "hi", mode: 0o755},
	}
}

func writeACI(t *testing.T, dir string, compress bool) (path string, rawTar []byte) {
	t.Helper()
	raw := buildTar(t, helloEntries()).Bytes()
	path = filepath.Join(dir, "hello.aci")
	data := raw
	if compress {
		var zbuf bytes.Buffer
		zw := gzip.NewWriter(&zbuf)
		if _, err := zw.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		data = zbuf.Bytes()
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, raw
}

func TestOpenFileStore(t *testing.T) {
	needRoot(t)
	for _, compress := range []bool{false, true} {
		name := "plain"
		if compress {
			name = "gzip"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			aci, raw := writeACI(t, dir, compress)
			store := filepath.Join(dir, "pod1", "images")
			img, err := Open(aci, store)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			fileData, _ := os.ReadFile(aci)
			fileSum := sha512.Sum512(fileData)
			if want := hex.EncodeToString(fileSum[:])[:keyHexLen]; img.TreeStoreID != want {
				t.Errorf("TreeStoreID %q, want %q", img.TreeStoreID, want)
			}
			tarSum := sha512.Sum512(raw)
			if want := "sha512-" + hex.EncodeToString(tarSum[:])[:keyHexLen]; img.ID.String() != want {
				t.Errorf("ID %q, want %q (sha512 of the uncompressed tar)", img.ID, want)
			}
			if img.Dir != filepath.Join(store, img.TreeStoreID) {
				t.Errorf("Dir %q", img.Dir)
			}
			if got, _ := os.ReadFile(filepath.Join(img.Rootfs(), "hello")); string(got) != "hi" {
				t.Errorf("rootfs/hello = %q", got)
			}
			if img.Manifest.Name.String() != "example.com/hello" || string(img.ManifestJSON) != testManifest {
				t.Errorf("manifest not kept verbatim")
			}
			if err := img.CheckApp(); err != nil {
				t.Errorf("CheckApp: %v", err)
			}
			fi, err := os.Stat(store)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("store mode %v, %v", fi.Mode(), err)
			}

			// A second open must reuse the entry, not extract again.
			marker := filepath.Join(img.Rootfs(), "marker")
			if err := os.WriteFile(marker, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			img2, err := Open(aci, store)
			if err != nil {
				t.Fatalf("second Open: %v", err)
			}
			if _, err := os.Stat(filepath.Join(img2.Rootfs(), "marker")); err != nil {
				t.Errorf("second Open did not reuse the store entry: %v", err)
			}
			ents, _ := os.ReadDir(store)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".tmp-") {
					t.Errorf("temporary entry %s left in the store", e.Name())
				}
			}
		})
	}
}

func TestOpenFileFailureLeavesNoEntry(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	aci := filepath.Join(dir, "bad.aci")
	bad := buildTar(t, []entry{
		{name: "manifest", typ: tar.TypeReg, body: testManifest},
		{name: "rootfs/", typ: tar.TypeDir},
		{name: "rootfs/../../escape", typ: tar.TypeReg, body: "x"},
	})
	if err := os.WriteFile(aci, bad.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	if _, err := OpenFile(aci, store); !errors.Is(err, ErrDotDot) {
		t.Fatalf("OpenFile error = %v, want ErrDotDot", err)
	}
	ents, _ := os.ReadDir(store)
	if len(ents) != 0 {
		t.Errorf("store holds %v after a failed extraction", ents)
	}
}

func TestOpenDir(t *testing.T) {
	dir := t.TempDir()
	mk := func(name, manifest string, rootfs bool) string {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if manifest != "" {
			if err := os.WriteFile(filepath.Join(d, "manifest"), []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if rootfs {
			if err := os.Mkdir(filepath.Join(d, "rootfs"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	good := mk("good", testManifest, true)
	img, err := Open(good, filepath.Join(dir, "store"))
	if err != nil {
		t.Fatalf("Open dir: %v", err)
	}
	if img.Dir != good || !strings.HasPrefix(img.TreeStoreID, "dir-") || img.ID.String() == "" {
		t.Errorf("dir image: %+v", img)
	}
	if _, err := os.Stat(filepath.Join(dir, "store")); err == nil {
		t.Errorf("an ACI directory was copied into the store")
	}

	for _, tc := range []struct{ name, manifest, want string }{
		{"nomanifest", "", "manifest"},
		{"badjson", "{", "invalid manifest"},
		{"badkind", `{"acKind":"PodManifest","acVersion":"0.8.11","name":"x"}`, "invalid manifest"},
	} {
		if _, err := OpenDir(mk(tc.name, tc.manifest, true)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	if _, err := OpenDir(mk("norootfs", testManifest, false)); !errors.Is(err, ErrNotACI) {
		t.Errorf("norootfs: error %v, want ErrNotACI", err)
	}
	noArch := `{"acKind":"ImageManifest","acVersion":"0.8.11","name":"x","labels":[{"name":"os","value":"linux"}]}`
	img, err = OpenDir(mk("noarch", noArch, true))
	if err != nil {
		t.Fatal(err)
	}
	if err := img.CheckApp(); err == nil || !strings.Contains(err.Error(), "arch") {
		t.Errorf("CheckApp without arch label: %v", err)
	}
}
