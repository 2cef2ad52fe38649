package tests

import (
	"strings"
	"testing"
)

// An app can open its own stdout and stderr again by path, as nginx does
// with its logs linked to /dev/stdout, also in a user namespace
// (--private-users), where the pipes, host root's with mode 0600, were
// refused with EACCES even to the namespace's root, and as a user that is
// not root. No other app can open them through its /proc, even holding
// CAP_SYS_PTRACE and CAP_DAC_OVERRIDE.
func TestReopenStdio(t *testing.T) {
	for _, private := range []bool{true, false} {
		t.Run(map[bool]string{true: "private", false: "host-users"}[private], func(t *testing.T) {
			paths := []string{"/dev/stdout", "/proc/self/fd/1", "/dev/stderr", "/proc/self/fd/2"}
			apps := []App{
				{Name: "a", Exec: probe(append(append([]string{"reopen"}, paths...), "+", "sleep", "3s", "+", "tag", "victim-marker")...)},
				{Name: "u", User: "1000", Group: "1000", Exec: probe(append([]string{"reopen"}, paths...)...)},
				{Name: "spy", Exec: probe("sleep", "1s", "+", "reopen-others", "victim-marker")},
			}
			p := isoPod(t, apps, Isolators{"spy": {isolator("os/linux/capabilities-retain-set",
				map[string]any{"set": []string{"CAP_SYS_PTRACE", "CAP_DAC_OVERRIDE"}})}}, nil)
			args := []string{"--net=none"}
			if private {
				shiftOwnership(t, p, usersBase)
				args = append(args, privateUsers)
			}
			r := runPod(t, p, RunOpts{Args: args})
			out, errOut := r.Stdout.String(), r.Stderr.String()
			if r.Code != 0 {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", r.Code, out, errOut)
			}
			for _, p := range paths {
				if n := strings.Count(out, "reopen "+p+" ok\n"); n != 2 {
					t.Errorf("%d apps of 2 reopened %s:\n%s", n, p, out)
				}
				w := out
				if strings.HasSuffix(p, "2") || strings.HasSuffix(p, "stderr") {
					w = errOut
				}
				if n := strings.Count(w, "via "+p+"\n"); n != 2 {
					t.Errorf("%d lines of 2 written through %s arrived:\nstdout %s\nstderr %s", n, p, out, errOut)
				}
			}
			if private {
				if !strings.Contains(out, "reopen-others ") || strings.Contains(out, "reopen-others ok") || strings.Contains(out, "intruder") {
					t.Errorf("another app's stdout, or none was tried:\n%s", out)
				}
			}
		})
	}
}

// The same for the stdio rkt attach serves, in a user namespace: a tty
// app's terminal and a stream app's pipes.
func TestReopenStdioAttachModes(t *testing.T) {
	paths := []string{"/dev/stdout", "/proc/self/fd/1", "/dev/stderr"}
	mode := func(m string) map[string]string {
		return map[string]string{"coreos.com/rkt/stage2/stdin": m, "coreos.com/rkt/stage2/stdout": m, "coreos.com/rkt/stage2/stderr": m}
	}
	apps := []App{
		{Name: "t", Annotations: mode("tty"), Exec: probe(append([]string{"reopen"}, paths...)...)},
		{Name: "s", Annotations: mode("stream"), Exec: probe(append([]string{"reopen"}, paths...)...)},
	}
	p := newPod(t, apps, nil)
	shiftOwnership(t, p, usersBase)
	r := runPod(t, p, RunOpts{Args: []string{"--net=none", privateUsers}})
	out := strings.ReplaceAll(r.Stdout.String()+r.Stderr.String(), "\r\n", "\n")
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, out)
	}
	for _, p := range paths {
		if n := strings.Count(out, "reopen "+p+" ok\n"); n != 2 {
			t.Errorf("%d apps of 2 reopened %s:\n%s", n, p, out)
		}
		if n := strings.Count(out, "via "+p+"\n"); n != 2 {
			t.Errorf("%d lines of 2 written through %s arrived:\n%s", n, p, out)
		}
	}
}
