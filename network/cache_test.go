package network

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// removeLeftCaches removes the pod's cache directories in the temporary
// directory and nothing else there: not another pod's, not a symlink or a
// file planted under the pod's name, and nothing at all for a UUID that
// would read as a path or a pattern.
func TestRemoveLeftCaches(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	const uuid = "6b4a1f5e-0d3c-4c1e-9d55-2f0f2a1d8e11"
	mk := func(name string) string {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(p, "results"), 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	left := mk(cacheDirPrefix(uuid) + "123")
	other := mk(cacheDirPrefix("0b4a1f5e-0d3c-4c1e-9d55-2f0f2a1d8e11") + "456")
	target := mk("elsewhere")
	link := filepath.Join(tmp, cacheDirPrefix(uuid)+"link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(tmp, cacheDirPrefix(uuid)+"file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removeLeftCaches("*")
	removeLeftCaches("../" + uuid)
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("a pattern for a UUID removed another pod's cache: %v", err)
	}
	removeLeftCaches(uuid)
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pod's cache is still there: %v", err)
	}
	for _, keep := range []string{other, target, link, file, filepath.Join(target, "results")} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}
