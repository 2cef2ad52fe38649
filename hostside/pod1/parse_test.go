package main

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/hostside/launch"
)

func parse(t *testing.T, args ...string) (launch.Options, error) {
	t.Helper()
	return parseRunArgs(&globalFlags{dir: launch.DefaultDir}, args)
}

func TestParseImageList(t *testing.T) {
	o, err := parse(t,
		"--net=host", "--volume", "data,kind=empty,mode=0700", "--set-env=G=1", "--stage1-path=/s1.aci",
		"img1.aci", "--name=a", "--mount", "volume=data,target=/d", "--set-env=A=1", "--set-env", "G=2",
		"--", "x", "--not-a-flag", "--", "y", "---",
		"img2", "--exec", "/bin/sh", "--user=u", "--group=g", "--working-dir=/w", "-name", "b",
		"---", "img3", "img4", "--", "z")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if o.Net != "host" || o.Stage1 != "/s1.aci" || o.Dir != launch.DefaultDir {
		t.Errorf("pod flags: %+v", o)
	}
	if len(o.Volumes) != 1 || o.Volumes[0].Name != "data" || *o.Volumes[0].Mode != "0700" {
		t.Errorf("volumes %+v", o.Volumes)
	}
	env := func(kv ...string) []types.EnvironmentVariable {
		var out []types.EnvironmentVariable
		for i := 0; i < len(kv); i += 2 {
			out = append(out, types.EnvironmentVariable{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	want := []launch.AppOptions{
		{Image: "img1.aci", Name: "a", Args: []string{"x", "--not-a-flag", "--", "y"},
			Env:    env("G", "1", "A", "1", "G", "2"),
			Mounts: []schema.Mount{{Volume: "data", Path: "/d"}}},
		{Image: "img2", Name: "b", Exec: "/bin/sh", User: "u", Group: "g", WorkingDir: "/w", Env: env("G", "1")},
		{Image: "img3", Env: env("G", "1")},
		{Image: "img4", Args: []string{"z"}, Env: env("G", "1")},
	}
	if !reflect.DeepEqual(o.Apps, want) {
		t.Errorf("apps\n got %+v\nwant %+v", o.Apps, want)
	}
}

func TestParseDefaults(t *testing.T) {
	// "--" ends the pod flags, as with rkt; what follows is the image list.
	o, err := parse(t, "--", "img")
	if err != nil || len(o.Apps) != 1 || o.Apps[0].Image != "img" {
		t.Fatalf("-- img: %+v, %v", o.Apps, err)
	}
	o, err = parse(t, "img")
	if err != nil {
		t.Fatal(err)
	}
	// The launcher turns "" into "default"; the flag adds nothing itself.
	if o.Net != "" || o.NoOverlay || o.Debug || o.Interactive || !strings.HasSuffix(o.Stage1, "/build/stage1.aci") {
		t.Errorf("defaults: %+v", o)
	}
	o, err = parse(t, "--net=a", "--net", "b,c", "--no-overlay", "--interactive", "--debug", "--insecure-options=image,all-run",
		"--hostname=h", "--uuid-file-save=/u", "--dir=/d", "img")
	if err != nil {
		t.Fatal(err)
	}
	if o.Net != "a,b,c" || !o.NoOverlay || !o.Interactive || !o.Debug || o.Hostname != "h" || o.UUIDFileSave != "/u" || o.Dir != "/d" {
		t.Errorf("flags: %+v", o)
	}
}

func TestParseErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no image"},
		{[]string{"--bogus", "img"}, "-bogus"},
		{[]string{"img", "--bogus"}, "-bogus"},
		{[]string{"img", "--exec"}, "--exec"},
		{[]string{"---", "img"}, "---"},
		{[]string{"--", "--", "arg"}, "--: app arguments must follow an image"},
		{[]string{"--", "-x", "img"}, "-x: app flag must follow an image"},
		{[]string{"--volume", "data,kind=bogus", "img"}, "-volume"},
		{[]string{"--volume", "d,kind=empty", "--volume", "d,kind=empty", "img"}, "duplicate volume"},
		{[]string{"img", "--mount", "volume=data"}, "-mount"},
		{[]string{"img", "--mount", "volume=data,target=rel"}, "absolute"},
		{[]string{"img", "--mount", "volume=data,target=/x,extra=1"}, "extra"},
		{[]string{"img", "--set-env=NOEQUALS"}, "-set-env"},
		{[]string{"img", "--set-env=1BAD=x"}, "-set-env"},
		{[]string{"--net=", "img"}, "-net"},
	} {
		_, err := parse(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

func TestUsageErrorsExit254OneLine(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--bogus"},
		{"run"},
		{"nosuchcommand"},
		{},
		{"--dir"},
		{"run", "img", "--name"},
	} {
		var out, errb bytes.Buffer
		if code := pod1Main(args, &out, &errb); code != 254 {
			t.Errorf("pod1 %q exited %d, want 254", args, code)
		}
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "pod1") {
			t.Errorf("pod1 %q stderr %q, want one line", args, errb.String())
		}
	}
	var out bytes.Buffer
	if code := pod1Main([]string{"run", "--help"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "--stage1-path") && !strings.Contains(out.String(), "-stage1-path") {
		t.Errorf("run --help: code %d, output %q", code, out.String())
	}
}

func TestGlobalFlagsBeforeCommand(t *testing.T) {
	g := &globalFlags{dir: launch.DefaultDir}
	fs := newFlagSet("pod1")
	g.register(fs)
	if err := fs.Parse([]string{"--dir=/x", "--debug", "run"}); err != nil {
		t.Fatal(err)
	}
	o, err := parseRunArgs(g, []string{"img"})
	if err != nil || o.Dir != "/x" || !o.Debug {
		t.Errorf("global flags before the command lost: %+v, %v", o, err)
	}
	o, err = parseRunArgs(g, []string{"--dir=/y", "img"})
	if err != nil || o.Dir != "/y" {
		t.Errorf("run --dir did not override: %+v, %v", o, err)
	}
}
