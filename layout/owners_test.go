package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Each name and limit of a pod has one owner, this package: no other
// package keeps a local copy of one (an alias drifts, and hides who
// uses the name), spells the read cap again, or writes the status
// markers' suffixes itself.
func TestNamesAreSpelledOnlyHere(t *testing.T) {
	alias := regexp.MustCompile(`(?m)^(const |var |\t)\w+\s*=\s*layout\.\w+[ \t]*(//.*)?$`)
	bad := map[string]*regexp.Regexp{
		"a local alias of a layout name":                                 alias,
		"the read cap (layout.MaxFileSize)":                              regexp.MustCompile(`(?m)^[^/\n]*\b16\s*<<\s*20\b`),
		"a status marker's suffix (layout.CreatedSuffix, StartedSuffix)": regexp.MustCompile(`(?m)^[^/\n]*"-(created|started)"`),
	}
	seen := 0
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "build", "bin", "layout":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		seen++
		for what, re := range bad {
			if m := re.Find(b); m != nil {
				t.Errorf("%s: %s: %q", p, what, strings.TrimSpace(string(m)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 100 {
		t.Fatalf("only %d Go files seen above layout/", seen)
	}
}
