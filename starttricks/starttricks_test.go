package starttricks

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite waiter/tricks.h from the list")

// The C waiter and keeper read Env with the names of waiter/tricks.h: it
// must be this list, or a name the Go run accepts would be one the waiter
// refuses, or a trick of the waiter's would answer to another's name.
func TestCHeader(t *testing.T) {
	const path = "../waiter/tricks.h"
	want := CHeader()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not the list's: go test ./starttricks -update\n--- have\n%s--- want\n%s", path, got, want)
	}
}

func TestParse(t *testing.T) {
	s, err := Parse(" shed, fdtable,,commit ")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Off(Shed) || !s.Off(FDTable) || !s.Off(Commit) || s.Off(Prime) {
		t.Fatalf("set %v", s)
	}
	if got := s.String(); got != "shed,fdtable,commit" {
		t.Fatalf("String %q", got)
	}
	if again, err := Parse(s.String()); err != nil || again != s {
		t.Fatalf("round trip: %v %v", again, err)
	}
	if s, err := Parse(""); err != nil || s != 0 {
		t.Fatalf("empty: %v %v", s, err)
	}
	_, err = Parse("shed,spair")
	if err == nil || !strings.Contains(err.Error(), `"spair"`) || !strings.Contains(err.Error(), Env) {
		t.Fatalf("unknown name: %v", err)
	}
}

func TestArgs(t *testing.T) {
	s, _ := Parse("fdtable,commit")
	got, err := FromArgs([]string{"--debug", Arg(s)})
	if err != nil || got != s {
		t.Fatalf("FromArgs: %v %v", got, err)
	}
	if Arg(0) != "" {
		t.Fatalf("Arg of none: %q", Arg(0))
	}
	if got, err := FromArgs([]string{"--debug"}); err != nil || got != 0 {
		t.Fatalf("no argument: %v %v", got, err)
	}
	if _, err := FromArgs([]string{"--tricks-off=nope"}); err == nil {
		t.Fatal("an unknown name in the argument is accepted")
	}
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, tr := range All() {
		n := tr.Name()
		if n == "" || seen[n] || strings.ContainsAny(n, ", \"\\") {
			t.Errorf("trick %d: name %q", tr, n)
		}
		seen[n] = true
	}
}
