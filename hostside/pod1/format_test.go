package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRelTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "now"}, {1500 * time.Millisecond, "1 second ago"}, {45 * time.Second, "45 seconds ago"},
		{90 * time.Second, "1 minute ago"}, {59 * time.Minute, "59 minutes ago"}, {3 * time.Hour, "3 hours ago"},
		{36 * time.Hour, "1 day ago"}, {3 * 24 * time.Hour, "3 days ago"}, {10 * 24 * time.Hour, "1 week ago"},
		{-3 * time.Hour, "3 hours from now"},
	} {
		if got := relTime(now.Add(-c.ago), now); got != c.want {
			t.Errorf("%v ago: %q, want %q", c.ago, got, c.want)
		}
	}
}

func TestWaitFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"true": -1, "false": 0, "10s": 10 * time.Second, "-1s": -1, "0s": 0} {
		var f waitFlag
		if err := f.Set(in); err != nil || f.d != want {
			t.Errorf("%q: %v %v", in, f.d, err)
		}
	}
	var f waitFlag
	if err := f.Set("soon"); err == nil {
		t.Error("accepted a bad duration")
	}
	// A bare --wait is a boolean flag set to true.
	var out, errb bytes.Buffer
	code := pod1Main([]string{"--dir=" + t.TempDir(), "status", "--wait", "--format=json"}, &out, &errb)
	if code != exitError || !strings.Contains(errb.String(), "want exactly one UUID") {
		t.Errorf("status without UUID: %d %q", code, errb.String())
	}
}

// Flags may follow arguments, as with rkt's commands; "--" ends them.
func TestParseCommandInterspersed(t *testing.T) {
	fs := newFlagSet("x")
	force := fs.Bool("force", false, "")
	var out, errb bytes.Buffer
	if _, done := parseCommand(fs, []string{"a", "--force", "b", "--", "--c"}, "", &out, &errb, "x"); done {
		t.Fatal(errb.String())
	}
	if !*force || strings.Join(fs.Args(), " ") != "a b --c" {
		t.Fatalf("force=%v args=%q", *force, fs.Args())
	}
	fs = newFlagSet("x")
	if code, done := parseCommand(fs, []string{"a", "--nope"}, "", &out, &errb, "x"); !done || code != exitError {
		t.Fatalf("bad flag: %d %v", code, done)
	}
}

func TestUsageErrorsAre254(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"list", "extra"}, {"gc", "--grace-period=soon"}, {"stop"}, {"enter"},
		{"status", "--format=yaml", "x"}, {"status", "nosuchpod"},
	} {
		var out, errb bytes.Buffer
		code := pod1Main(append([]string{"--dir=" + dir}, args...), &out, &errb)
		if code != exitError || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%v: code %d, stderr %q", args, code, errb.String())
		}
	}
}
