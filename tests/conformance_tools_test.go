package tests

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// make vm-conformance reports the chunks of one stage1 together: the
// results directories of runs of that stage1, oldest first, and none of
// another stage1, even one run between them.
func TestConformanceChunksOfOneStage1(t *testing.T) {
	dir := t.TempDir()
	run := func(name, sha string, summary bool) {
		d := filepath.Join(dir, name)
		must(t, os.MkdirAll(d, 0o755))
		env := "date: x\nstage1 under test: /tmp/pod1-vm/repo/build/stage1.aci (sha256 " + sha + ")\n"
		if sha == "" {
			env = "date: x\n"
		}
		must(t, os.WriteFile(filepath.Join(d, "env.txt"), []byte(env), 0o644))
		if summary {
			must(t, os.WriteFile(filepath.Join(d, "summary.tsv"), []byte("TestX\tPASS\t1\n"), 0o644))
		}
	}
	same := func() ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(repoRoot, "tools/rkt-conformance/same-stage1.sh"), dir).Output()
		var got []string
		for _, l := range strings.Fields(string(out)) {
			got = append(got, filepath.Base(l))
		}
		return got, err
	}
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	run("20261207-010000", a, true)
	run("20261207-020000", b, true)
	run("20261207-030000", a, false) // a run that wrote no summary
	run("20261207-040000", a, true)
	got, err := same()
	if err != nil || !slices.Equal(got, []string{"20261207-010000", "20261207-040000"}) {
		t.Fatalf("chunks of the newest stage1: %q, %v; want the first and the last", got, err)
	}
	run("20261207-050000", b, true)
	if got, err := same(); err != nil || !slices.Equal(got, []string{"20261207-020000", "20261207-050000"}) {
		t.Fatalf("after a run of another stage1: %q, %v", got, err)
	}
	run("20261207-060000", "", true)
	if got, err := same(); err == nil {
		t.Fatalf("the newest run names no stage1: %q, want an error", got)
	}
}

// The images are packed reproducibly (the Makefile's REPRO_TAR): no entry
// carries the time it was built at, and each directory's entries come in
// name order, so the same files give the same digest and a digest names
// the content. Without it each rebuild gave the stage1 another sha256.
func TestImagesArePackedReproducibly(t *testing.T) {
	for _, img := range []string{"build/stage1.aci", "build/demo-hello.aci"} {
		f, err := os.Open(filepath.Join(repoRoot, img))
		must(t, err)
		defer f.Close()
		tr := tar.NewReader(f)
		last := map[string]string{}
		n := 0
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			must(t, err)
			n++
			if !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
				t.Fatalf("%s: %s has mtime %v, owner %d:%d (%q:%q)", img, h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
			}
			name := strings.TrimSuffix(h.Name, "/")
			dir, base := filepath.Dir(name), filepath.Base(name)
			if prev, ok := last[dir]; ok && prev > base {
				t.Fatalf("%s: %s comes after %s/%s", img, h.Name, dir, prev)
			}
			last[dir] = base
		}
		if n < 5 {
			t.Fatalf("%s: %d entries", img, n)
		}
	}
}
