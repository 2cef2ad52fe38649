package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/layout"
)

// T-ENTER-1 (CVE-2019-10144, 10145, 10147): a process entered into an app
// gets exactly the app's isolation, whatever the isolators: the same
// capability sets, no_new_privs, seccomp filter (the same call answers the
// same errno), OOM score, masked paths and read-only root as the app's own
// process, read by both from inside.
func TestEnterGetsTheAppsIsolation(t *testing.T) {
	t.Run("host-users", func(t *testing.T) { enterGetsTheAppsIsolation(t, false) })
	// In a user namespace (--private-users) the entered command gets
	// one with the app's mapping, and the same isolation in it.
	t.Run("private-users", func(t *testing.T) { enterGetsTheAppsIsolation(t, true) })
}

func enterGetsTheAppsIsolation(t *testing.T, private bool) {
	check := probe("cat", "/proc/self/uid_map", "+", "ids", "+", "status", "+", "cat", "/proc/self/oom_score_adj", "+", "syscall", "sysinfo", "+", "syscall", "unshare", "0",
		"+", "open-write", "/etc/passwd", "+", "stat", "/proc/timer_list")
	isos := []map[string]any{
		isolator("os/linux/capabilities-retain-set", map[string]any{"set": []string{"CAP_NET_BIND_SERVICE", "CAP_CHOWN", "CAP_SETUID"}}),
		isolator("os/linux/no-new-privileges", true),
		seccompSet("remove", "ENOTSUP", "@rkt/default-blacklist", "sysinfo"),
		isolator("os/linux/oom-score-adj", 600),
	}
	p := isoPod(t, []App{{Name: "a", Exec: append(append([]string{}, check...), "+", "sleep", "1h")}}, Isolators{"a": isos}, nil, "a")
	if _, err := os.Lstat(filepath.Join(p.Dir, layout.Stage1RootFS, "enter")); err != nil {
		must(t, os.Symlink(bin("stage1-init"), filepath.Join(p.Dir, layout.Stage1RootFS, "enter")))
	}
	o := RunOpts{}
	if private {
		shiftOwnership(t, p, usersBase)
		o.Args = []string{"--net=none", privateUsers}
	}
	r := start(t, p, o)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
		}
	})
	appPid(t, p, "a")
	waitFor(t, 10*time.Second, "the app's report", func() bool { return strings.Contains(r.Stdout.String(), "stat /proc/timer_list") })
	out, errOut, code := rktEnter(t, p, "a", check...)
	if code != 0 {
		t.Fatalf("enter: %d %s", code, errOut)
	}
	keep := func(s string) []string {
		var ls []string
		for _, l := range strings.Split(s, "\n") {
			if l != "" && !strings.HasPrefix(l, "status Sig") {
				ls = append(ls, l)
			}
		}
		return ls
	}
	app, entered := keep(r.Stdout.String()), keep(out)
	if strings.Join(app, "\n") != strings.Join(entered, "\n") {
		t.Fatalf("entered process:\n%s\nthe app:\n%s", strings.Join(entered, "\n"), strings.Join(app, "\n"))
	}
	wantMap := "0 0 4294967295"
	if private {
		wantMap = "0 " + strconv.Itoa(usersBase) + " " + strconv.Itoa(usersCount)
	}
	if got := strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " "); got != "cat "+wantMap {
		t.Errorf("entered process's uid map %q, want %q", got, wantMap)
	}
	for _, w := range []string{"status NoNewPrivs: 1", "status Seccomp: 2", "cat 600", "syscall sysinfo ENOTSUP",
		"open-write /etc/passwd EROFS", "status CapEff: " + capMask(t, "CAP_CHOWN", "CAP_SETUID", "CAP_NET_BIND_SERVICE")} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("entered process lacks %q", w)
		}
	}
}
