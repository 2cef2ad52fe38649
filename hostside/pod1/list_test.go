package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The table lists more pods than one worker's chunk in UUID order, a pod
// whose manifest names a bad app with the apps before it, and reports that
// manifest after the table, one line, exit 0.
func TestListTable(t *testing.T) {
	data := t.TempDir()
	good := `{"apps":[{"name":"a","image":{"id":"sha512-a"}},{"name":"b","image":{"id":"sha512-b"}}]}`
	bad := `{"apps":[{"name":"a","image":{"id":"sha512-a"}},{"name":"../x","image":{"id":"x"}}]}`
	var want []string
	for i := 0; i < 40; i++ {
		u := fmt.Sprintf("%08x-2222-4333-8444-555555555555", i)
		dir := filepath.Join(data, "pods", "run", u)
		if err := os.MkdirAll(filepath.Join(dir, "appsinfo", "a"), 0o755); err != nil {
			t.Fatal(err)
		}
		m := good
		if i%7 == 3 {
			m = bad
		}
		for name, content := range map[string]string{"pod": m, "appsinfo/a/manifest": fmt.Sprintf(`{"name":"x.org/a%d"}`, i)} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, u[:8]+" a x.org/a"+fmt.Sprint(i)+" exited")
		if m == good {
			want = append(want, "b --")
		}
	}
	var out, errb bytes.Buffer
	if code := pod1Main([]string{"--dir=" + data, "list", "--no-legend"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, l := range lines {
		// The times (the manifest's mtime, no pid file) are left out.
		f := strings.Fields(l)
		if len(f) > 4 {
			f = f[:4]
		}
		if got := strings.Join(f, " "); got != want[i] {
			t.Errorf("line %d: %q, want the fields %q", i, l, want[i])
		}
	}
	errLines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
	if len(errLines) != 6 {
		t.Fatalf("stderr: %q, want one line for each of 6 bad manifests", errb.String())
	}
	for _, l := range errLines {
		if !strings.HasPrefix(l, "pod1 list: pod ") || !strings.Contains(l, "app name is not an ACName") {
			t.Errorf("stderr line %q", l)
		}
	}
}
