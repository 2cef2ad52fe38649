package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pod1/pod1/layout"
)

// An app gets /dev/null as stdin, not the stdin of rkt run (rkt's
// StandardInput=null): input typed at the caller's terminal must not reach
// an app that did not ask for it.
func TestStdinIsDevNull(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("stdio", "+", "read-stdin")}}, nil)
	r := runPod(t, p, RunOpts{Stdin: strings.NewReader("secret\n")})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if got := r.Line(t, "stdio "); !strings.HasPrefix(got, "stdio 0=chr:1:3 ") {
		t.Errorf("stdin is not /dev/null: %s", got)
	}
	if got := r.Line(t, "stdin "); got != `stdin ""` {
		t.Errorf("the app read the caller's stdin: %s", got)
	}
}

// --interactive gives the one app the caller's stdin, stdout and stderr
// themselves: no log pipe in between, no log file.
func TestInteractiveStdio(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("read-stdin", "+", "stdio")}}, nil)
	r := runPod(t, p, RunOpts{Args: []string{"--net=none", "--interactive"}, Stdin: strings.NewReader("typed\n")})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if got := r.Line(t, "stdin "); got != `stdin "typed\n"` {
		t.Errorf("interactive app read %s", got)
	}
	if _, err := os.Stat(filepath.Join(p.Dir, layout.LogDir)); err == nil {
		t.Errorf("an interactive pod made a log directory")
	}
}

func TestInteractiveOneApp(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}, {Name: "b", Exec: probe("exit", "0")}}, nil)
	r := runPod(t, p, RunOpts{Args: []string{"--net=none", "--interactive"}})
	if r.Code != 254 || !strings.Contains(r.Stderr.String(), "--interactive: the pod has 2 apps") {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
	if p.Status(t, "a") != -1 {
		t.Error("an app ran")
	}
}

// rkt's per-app stdio annotations: null silences a stream, interactive
// hands over the caller's, stream is a pipe (served to rkt attach), tty a
// terminal, mixing tty and stream or anything else refuses the pod.
func TestStdioAnnotations(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("stdio", "+", "read-stdin", "+", "out", "2", "1", "err-line"),
		Annotations: map[string]string{
			"coreos.com/rkt/stage2/stdin":  "interactive",
			"coreos.com/rkt/stage2/stderr": "null",
		}}, {Name: "b", Exec: probe("stdio", "+", "out", "2", "1", "b-err"),
		Annotations: map[string]string{
			"coreos.com/rkt/stage2/stdin":  "stream",
			"coreos.com/rkt/stage2/stdout": "stream",
		}}, {Name: "c", Exec: probe("stdio"),
		Annotations: map[string]string{
			"coreos.com/rkt/stage2/stdout": "tty",
		}}}, nil)
	r := runPod(t, p, RunOpts{Stdin: strings.NewReader("in\n")})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	if got := r.Line(t, "stdin "); got != `stdin "in\n"` {
		t.Errorf("stdin=interactive app read %s", got)
	}
	// a: stdin the caller's pipe, stderr /dev/null; b: stdin a pipe of
	// PID 1's, stdout and stderr log pipes; c: stdout a terminal (devpts,
	// major 136), stdin /dev/null.
	// c's line reaches the console through its terminal, whose line
	// discipline passes on the text and then the newline (as "\r\n"):
	// another app's line may come between them, so a console line may
	// hold two apps' records. Each record starts with "stdio ".
	var recs []string
	for _, l := range r.Lines("stdio ") {
		for _, rec := range strings.Split(l, "stdio ")[1:] {
			recs = append(recs, "stdio "+strings.TrimSuffix(rec, "\r"))
		}
	}
	var sawA, sawB, sawC bool
	for _, l := range recs {
		sawA = sawA || strings.HasPrefix(l, "stdio 0=fifo:") && strings.HasSuffix(l, " 2=chr:1:3")
		sawB = sawB || strings.HasPrefix(l, "stdio 0=fifo:") && strings.Contains(l, " 1=fifo:") && strings.Contains(l, " 2=fifo:")
		sawC = sawC || strings.HasPrefix(l, "stdio 0=chr:1:3 1=chr:136:") && strings.Contains(l, " 2=fifo:")
	}
	if !sawA || !sawB || !sawC {
		t.Errorf("unexpected stdio: %q", recs)
	}
	if strings.Contains(r.Stderr.String(), "err-line") {
		t.Errorf("stderr=null output reached the console: %s", r.Stderr)
	}
	if !strings.Contains(r.Stderr.String(), "b-err 0") {
		t.Errorf("b's stderr is missing from the console: %s", r.Stderr)
	}

	for _, bad := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{"coreos.com/rkt/stage2/stdout": "file"}, `annotation coreos.com/rkt/stage2/stdout: "file" is not one of`},
		{map[string]string{"coreos.com/rkt/stage2/stdin": "tty", "coreos.com/rkt/stage2/stdout": "stream"}, "tty and stream modes cannot be mixed"},
	} {
		p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0"), Annotations: bad.ann}}, nil)
		r = runPod(t, p, RunOpts{})
		if r.Code != 254 || !strings.Contains(r.Stderr.String(), bad.want) {
			t.Fatalf("%v: exit %d, stderr %q", bad.ann, r.Code, r.Stderr)
		}
	}
}
