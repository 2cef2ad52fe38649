package images

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// aciWith writes an ACI whose rootfs/hello holds body.
func aciWith(t *testing.T, path, body string) {
	t.Helper()
	raw := buildTar(t, []entry{
		{name: "manifest", typ: tar.TypeReg, body: testManifest},
		{name: "rootfs/", typ: tar.TypeDir},
		{name: "rootfs/hello", typ: tar.TypeReg, body: body, mode: 0o755},
	}).Bytes()
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

func hello(t *testing.T, img *Image) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(img.Rootfs(), "hello"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An unchanged ACI file is not hashed again: its recorded store key is
// used. The record is made to name another image's entry, which only a
// run that trusts it (and does not hash the file) can return.
func TestKnownFileIsNotHashedAgain(t *testing.T) {
	needRoot(t)
	defer func(w time.Duration) { racyWindow = w }(racyWindow)
	racyWindow = 0
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	a, b := filepath.Join(dir, "a.aci"), filepath.Join(dir, "b.aci")
	aciWith(t, a, "aa")
	aciWith(t, b, "bb")
	imgA, err := Open(a, store)
	if err != nil {
		t.Fatal(err)
	}
	imgB, err := Open(b, store)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	ident, err := identityOf(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if key, ok := knownStoreID(store, ident); !ok || key != imgA.TreeStoreID {
		t.Fatalf("record for a.aci = %q, %v; want %q", key, ok, imgA.TreeStoreID)
	}
	rememberStoreID(store, ident, imgB.TreeStoreID, time.Now())
	got, err := Open(a, store)
	if err != nil {
		t.Fatal(err)
	}
	if got.TreeStoreID != imgB.TreeStoreID || hello(t, got) != "bb" {
		t.Fatalf("Open of a recorded file gave %s (%q): the file was hashed again", got.TreeStoreID, hello(t, got))
	}
}

// A file written after it was recorded, even to the same size, is hashed
// again; so is one whose store entry was removed.
func TestKnownFileChangedIsHashedAgain(t *testing.T) {
	needRoot(t)
	defer func(w time.Duration) { racyWindow = w }(racyWindow)
	racyWindow = 0
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	a := filepath.Join(dir, "a.aci")
	aciWith(t, a, "v1")
	img1, err := Open(a, store)
	if err != nil {
		t.Fatal(err)
	}
	aciWith(t, a, "v2") // same size, same inode
	img2, err := Open(a, store)
	if err != nil {
		t.Fatal(err)
	}
	if img2.TreeStoreID == img1.TreeStoreID || hello(t, img2) != "v2" {
		t.Fatalf("changed file gave the old image (%q)", hello(t, img2))
	}
	if err := os.RemoveAll(img2.Dir); err != nil {
		t.Fatal(err)
	}
	img3, err := Open(a, store)
	if err != nil {
		t.Fatal(err)
	}
	if img3.TreeStoreID != img2.TreeStoreID || hello(t, img3) != "v2" {
		t.Fatalf("removed entry: got %s (%q)", img3.TreeStoreID, hello(t, img3))
	}
}

// A file changed less than racyWindow before it was read is not recorded:
// a write in the same clock tick would not change its ctime.
func TestKnownFileRecentlyChangedIsNotRecorded(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	a := filepath.Join(dir, "a.aci")
	aciWith(t, a, "v1")
	if _, err := Open(a, store); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(store, knownDir)); len(ents) != 0 {
		t.Fatalf("a file written just now was recorded: %v", ents)
	}
}
