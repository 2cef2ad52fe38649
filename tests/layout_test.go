package tests

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pod1/pod1/layout"
)

// pid1FileNames are app names that spell one of the stage1's own files or
// directories (options.json, cgroups.json, control.sock, apps/, rkt/pod1,
// the stage1's cgroup, rkt/hosts).
var pid1FileNames = []string{"options", "cgroups", "control", "apps", "pod1", "stage1", "hosts"}

// T-LAYOUT-1: an app's name never reaches the stage1's own files. Apps
// named "options" and "cgroups" once had their specs overwritten by the
// pod's options and cgroup (enter into them failed), and app/add of an
// "options" app overwrote a mutable pod's saved options.
func TestAppNamedLikePID1FilesImmutable(t *testing.T) {
	var apps []App
	for _, n := range pid1FileNames {
		apps = append(apps, App{Name: n, Exec: probe("sleep", "1h")})
	}
	p := newPod(t, apps, nil)
	start(t, p, RunOpts{})
	for _, n := range pid1FileNames {
		appPid(t, p, n)
		out, errOut, code := rktEnter(t, p, n, "/bin/probe", "env")
		if code != 0 || !strings.Contains(out, `"AC_APP_NAME=`+n+`"`) {
			t.Errorf("enter %s: code %d, stdout %q, stderr %q", n, code, out, errOut)
		}
	}
	assertPID1Files(t, p)
}

func TestAppNamedLikePID1FilesMutable(t *testing.T) {
	p, _ := sandbox(t, nil)
	opts, err := os.ReadFile(filepath.Join(p.Dir, layout.OptionsFile))
	must(t, err)
	for _, n := range pid1FileNames {
		a := App{Name: n, Exec: probe("sleep", "1h")}
		if code, out := addApp(t, p, a); code != 0 {
			t.Fatalf("add %s: %d %s", n, code, out)
		}
		if code, out := startApp(t, p, n); code != 0 {
			t.Fatalf("start %s: %d %s", n, code, out)
		}
		appPid(t, p, n)
		if got, _ := os.ReadFile(filepath.Join(p.Dir, layout.OptionsFile)); !bytes.Equal(got, opts) {
			t.Fatalf("after adding %s the saved options are %s, were %s", n, got, opts)
		}
		out, errOut, code := rktEnter(t, p, n, "/bin/probe", "env")
		if code != 0 || !strings.Contains(out, `"AC_APP_NAME=`+n+`"`) {
			t.Errorf("enter %s: code %d, stdout %q, stderr %q", n, code, out, errOut)
		}
	}
	assertPID1Files(t, p)
	// And the pod still takes apps: app/add reads the saved options.
	if code, out := addApp(t, p, App{Name: "late", Exec: probe("sleep", "1h")}); code != 0 {
		t.Fatalf("add late: %d %s", code, out)
	}
}

// assertPID1Files checks that the stage1's own files hold what the
// stage1 wrote there, not an app's spec.
func assertPID1Files(t *testing.T, p *Pod) {
	t.Helper()
	for _, f := range []struct{ path, want string }{
		{layout.OptionsFile, `"UUID":"` + p.UUID + `"`},
		{layout.CgroupsFile, `"`},
	} {
		b, err := os.ReadFile(filepath.Join(p.Dir, f.path))
		if err != nil {
			if f.path == layout.CgroupsFile && errors.Is(err, os.ErrNotExist) {
				continue // no usable cgroup hierarchy
			}
			t.Errorf("%s: %v", f.path, err)
			continue
		}
		if !strings.Contains(string(b), f.want) || strings.Contains(string(b), `"rootfs"`) {
			t.Errorf("%s holds %s", f.path, b)
		}
	}
}
