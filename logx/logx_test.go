package logx

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLineNamesRolePidLevel(t *testing.T) {
	var b bytes.Buffer
	SetOutput(&b)
	defer SetOutput(os.Stderr)
	SetRole("stage1", "gc")
	SetDebug(false)
	Debugf("hidden")
	Warnf("two\nlines %d", 2)
	SetDebug(true)
	defer SetDebug(false)
	if os.Getenv(DebugEnv) != "1" {
		t.Errorf("%s not set for children", DebugEnv)
	}
	Debugf("shown")
	Errorf("failed to %s", "go on")
	pid := strconv.Itoa(os.Getpid())
	want := "stage1: gc[" + pid + "] warning: two\\nlines 2\n" +
		"stage1: gc[" + pid + "] debug: shown\n" +
		"stage1: failed to go on\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestDebugArg(t *testing.T) {
	for args, want := range map[string]bool{
		"":                        false,
		"--debug":                 true,
		"--net=none --debug=true": true,
		"--debug --debug=false":   false,
		"-- --debug":              false,
		"--pid=3 -debug -- sh":    true,
	} {
		if got := DebugArg(strings.Fields(args)); got != want {
			t.Errorf("%q: %v", args, got)
		}
	}
}
