package tests

import (
	"regexp"
	"strings"
	"testing"
)

// One logger for every role: with --debug, run's stderr carries debug
// lines of PID 1 and of the app set-up, each naming its role and pid;
// without it, none at all.
func TestDebugReachesEveryRole(t *testing.T) {
	apps := []App{{Name: "a", Exec: probe("exit", "0")}}
	debugLine := regexp.MustCompile(`(?m)^stage1: ([a-z0-9-]+)\[([0-9]+)\] debug: `)

	p := newPod(t, apps, nil)
	r := runPod(t, p, RunOpts{Args: []string{"--net=none", "--debug"}})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	roles := map[string]string{}
	for _, m := range debugLine.FindAllStringSubmatch(r.Stderr.String(), -1) {
		roles[m[1]] = m[2]
	}
	if roles["pod1-init"] != "1" {
		t.Errorf("no debug line of PID 1 (pod1-init[1]): roles %v\n%s", roles, r.Stderr)
	}
	if _, ok := roles["pod1-app"]; !ok {
		t.Errorf("no debug line of the app set-up: roles %v\n%s", roles, r.Stderr)
	}

	p = newPod(t, apps, nil)
	r = runPod(t, p, RunOpts{Args: []string{"--net=none"}})
	if r.Code != 0 || strings.Contains(r.Stderr.String(), " debug: ") {
		t.Errorf("exit %d, stderr of a run without --debug: %q", r.Code, r.Stderr)
	}
}
