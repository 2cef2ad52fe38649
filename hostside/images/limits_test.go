package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An entry whose header claims more than the default bound (a sparse or
// zero-filled file that compresses to almost nothing) is refused before
// any of it is read or written.
func TestExtractRefusesAHugeFileByDefault(t *testing.T) {
	needRoot(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "manifest", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(testManifest))},
		{Name: "rootfs/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "rootfs/huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: DefaultLimits.MaxBytes},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest" {
			if _, err := tw.Write([]byte(testManifest)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// No body for "huge": the bound must act on the header alone.
	_ = tw.Flush()
	dest := t.TempDir()
	err := Extract(&buf, dest)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), `at "rootfs/huge"`) {
		t.Fatalf("Extract: %v, want ErrTooLarge at rootfs/huge", err)
	}
	if _, err := os.Lstat(filepath.Join(dest, "rootfs", "huge")); err == nil {
		t.Error("rootfs/huge was created")
	}
}

// Bounds given to OpenLimited: too many entries, or too many bytes summed
// over files each under the bound; the store is left as it was.
func TestOpenLimitedRefusesAndLeavesNothing(t *testing.T) {
	needRoot(t)
	var many, big []entry
	many = append(many, entry{name: "manifest", typ: tar.TypeReg, body: testManifest}, entry{name: "rootfs/", typ: tar.TypeDir})
	big = append(big, many...)
	for i := 0; i < 20; i++ {
		many = append(many, entry{name: fmt.Sprintf("rootfs/f%d", i), typ: tar.TypeReg})
		big = append(big, entry{name: fmt.Sprintf("rootfs/b%d", i), typ: tar.TypeReg, body: strings.Repeat("x", 100)})
	}
	for _, c := range []struct {
		name    string
		entries []entry
		lim     Limits
		want    string
	}{
		{"entries", many, Limits{MaxEntries: 10}, "more than 10 entries"},
		{"bytes", big, Limits{MaxBytes: 1000}, "more than 1000 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			aci := filepath.Join(dir, "big.aci")
			if err := os.WriteFile(aci, buildTar(t, c.entries).Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			store := filepath.Join(dir, "store")
			_, err := OpenLimited(aci, store, c.lim)
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), aci) {
				t.Fatalf("OpenLimited: %v, want ErrTooLarge naming %s and %q", err, aci, c.want)
			}
			if ents, _ := os.ReadDir(store); len(ents) != 0 {
				t.Errorf("store holds %v after a refused image", ents)
			}
			// Within the bounds the same image opens.
			if _, err := OpenLimited(aci, store, Limits{}); err != nil {
				t.Errorf("with the default limits: %v", err)
			}
		})
	}
}
