package podspec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/cgroups"
)

func TestEnvironDefaultsAndOrder(t *testing.T) {
	env, err := environ("web", types.Environment{{Name: "HOME", Value: "/srv"}, {Name: "A", Value: "1\n2"}, {Name: "AC_APP_NAME", Value: "x"}, {Name: "A", Value: "dup"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "HOME=/srv|A=1\n2|PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|SHELL=/bin/sh|USER=root|LOGNAME=root|AC_APP_NAME=web"
	if got := strings.Join(env, "|"); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, bad := range []types.EnvironmentVariable{{Name: "", Value: "x"}, {Name: "A=B", Value: "x"}, {Name: "K", Value: "a\x00b"}} {
		if _, err := environ("web", types.Environment{bad}); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestWorkingDir(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "srv/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/srv", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for wd, want := range map[string]string{"": "/", "/srv/app": "/srv/app", "/srv/app/": "/srv/app", "/link/app": "/link/app"} {
		got, err := workingDir(root, wd)
		if err != nil || got != want {
			t.Errorf("workingDir(%q) = %q, %v; want %q", wd, got, err, want)
		}
	}
	for _, bad := range []string{"srv", "/srv/../srv", "/proc/self/fd/3", "/dev", "/sys/x", "/missing"} {
		if got, err := workingDir(root, bad); err == nil {
			t.Errorf("workingDir(%q) accepted as %q", bad, got)
		}
	}
}

func TestMountTarget(t *testing.T) {
	// A relative target is taken from the app's root, as rkt does.
	dir := &volume{}
	for in, want := range map[string]string{"/data": "/data", "/a/../b": "/b", "/proc-like": "/proc-like", "data": "/data", "../../x": "/x", "/dev/shm": "/dev/shm", "dev/shm/": "/dev/shm"} {
		if got, err := mountTarget(in, dir); err != nil || got != want {
			t.Errorf("mountTarget(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "/", ".", "proc", "/proc", "/proc/sys", "/sys", "/dev", "/dev/fuse", "/dev/shm/x", "/x/../proc", "/devices/../dev/pts"} {
		if _, err := mountTarget(bad, dir); err == nil {
			t.Errorf("mountTarget(%q) of a directory accepted", bad)
		}
	}
	// The image's own mount points (Docker's) go nowhere on /dev.
	if _, err := mountTarget("/dev/shm", nil); err == nil {
		t.Error("mountTarget of an image's own directory on /dev/shm accepted")
	}
	// A device volume: a node of its own on /dev, nothing the stage1
	// makes there.
	dev := &volume{file: true, dev: &cgroups.Device{Type: 'c', Major: 10, Minor: 229}}
	for _, ok := range []string{"/dev/fuse", "/dev/net/tun", "/dev/sda", "/mnt/fuse"} {
		if got, err := mountTarget(ok, dev); err != nil || got != ok {
			t.Errorf("mountTarget(%q) of a device = %q, %v", ok, got, err)
		}
	}
	for _, bad := range []string{"/dev", "/dev/shm", "/dev/shm/x", "/dev/pts/0", "/dev/pts", "/dev/console", "/dev/null", "/dev/stdout", "/dev/fd/3", "/dev/mqueue/q", "/dev/ptmx", "/dev/log", "/proc/x", "/sys/x"} {
		if _, err := mountTarget(bad, dev); err == nil {
			t.Errorf("mountTarget(%q) of a device accepted", bad)
		}
	}
	// A regular file is no device.
	if _, err := mountTarget("/dev/fuse", &volume{file: true}); err == nil {
		t.Error("mountTarget(/dev/fuse) of a regular file accepted")
	}
}

func TestShmSize(t *testing.T) {
	for v, want := range map[string]int64{"1": 1, "4096": 4096, "512M": 512 << 20, "2g": 2 << 30, "1T": 1 << 40, "64k": 64 << 10} {
		if got, err := shmSize(ann(AnnShmSize, v)); err != nil || got != want {
			t.Errorf("shmSize(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	if got, err := shmSize(nil); err != nil || got != 0 {
		t.Errorf("shmSize(absent) = %d, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "M", "1.5G", "10%", "+5", "012", "1 G", "9223372036854775807K", "1P"} {
		if _, err := shmSize(ann(AnnShmSize, bad)); err == nil || !strings.Contains(err.Error(), AnnShmSize) {
			t.Errorf("shmSize(%q) = %v; want refused naming %s", bad, err, AnnShmSize)
		}
	}
}

func ann(kv ...string) types.Annotations {
	var a types.Annotations
	for i := 0; i < len(kv); i += 2 {
		a.Set(types.ACIdentifier(kv[i]), kv[i+1])
	}
	return a
}

func TestSupervisionAnnotations(t *testing.T) {
	s, err := supervision(annotations{nil})
	if err != nil || s.Restart != RestartNever || s.Backoff != DefaultBackoff || s.Burst != DefaultStartLimitBurst || s.Grace != DefaultGracePeriod {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	// The pod manifest's annotation wins over the image's.
	s, err = supervision(annotations{ann(AnnRestartPolicy, "always", AnnStopGracePeriod, "2s"), ann(AnnRestartPolicy, "never", AnnStartLimitBurst, "7")})
	if err != nil || s.Restart != RestartAlways || s.Grace != 2*time.Second || s.Burst != 7 {
		t.Fatalf("merge: %+v %v", s, err)
	}
	bad := [][]string{
		{AnnRestartPolicy, "sometimes"}, {AnnRestartBackoff, "-1s"}, {AnnRestartBackoff, "2h"},
		{AnnStartLimitBurst, "0"}, {AnnStartLimitBurst, "x"}, {AnnPidsMax, "-1"},
		{AnnRestartBackoff, "5s", AnnRestartBackoffMax, "1s"},
	}
	for _, kv := range bad {
		if _, err := supervision(annotations{ann(kv...)}); err == nil || !strings.Contains(err.Error(), "annotation pod1/") {
			t.Errorf("%v: %v", kv, err)
		}
	}
}

func TestExitPolicy(t *testing.T) {
	apps := map[string]bool{"web": true}
	if p, m, err := exitPolicy(nil, apps); err != nil || p != ExitAllApps || m != "" {
		t.Fatalf("default: %s %s %v", p, m, err)
	}
	if p, m, err := exitPolicy(ann(AnnExitPolicy, ExitMainApp, AnnMainApp, "web"), apps); err != nil || p != ExitMainApp || m != "web" {
		t.Fatalf("main: %s %s %v", p, m, err)
	}
	for _, a := range []types.Annotations{
		ann(AnnExitPolicy, "x"), ann(AnnExitPolicy, ExitMainApp), ann(AnnMainApp, "web"),
		ann(AnnExitPolicy, ExitMainApp, AnnMainApp, "db"),
	} {
		if _, _, err := exitPolicy(a, apps); err == nil {
			t.Errorf("accepted %v", a)
		}
	}
}

func TestCheckAppNames(t *testing.T) {
	ok := `{"apps":[{"name":"a"},{"name":"web"},{"name":"web-1"}]}`
	if err := checkAppNames([]byte(ok)); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"apps":[{"name":"A"}]}`:                          `apps[0].name: invalid app name "A"`,
		`{"apps":[{"name":"a"},{"name":"a"}]}`:             `apps[1].name: duplicate app name "a"`,
		`{"apps":[{"name":"web"},{"name":"web-started"}]}`: `collides with status marker of app "web"`,
		`{"apps":[{}]}`:                                    `apps[0].name: missing`,
		`{"apps":`:                                         `invalid JSON`,
	} {
		err := checkAppNames([]byte(in))
		var fe *fieldError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &fe) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}

func TestPodPidsMax(t *testing.T) {
	if n, err := podPidsMax(nil); n != -1 || err != nil {
		t.Fatalf("unset: %d %v", n, err)
	}
	for v, want := range map[string]int{"0": 0, "100": 100, "4194304": 1 << 22} {
		if n, err := podPidsMax(ann(AnnPodPidsMax, v)); n != want || err != nil {
			t.Errorf("%s: %d %v", v, n, err)
		}
	}
	for _, v := range []string{"-1", "4194305", "x", ""} {
		if _, err := podPidsMax(ann(AnnPodPidsMax, v)); err == nil || !strings.Contains(err.Error(), AnnPodPidsMax) {
			t.Errorf("%q accepted: %v", v, err)
		}
	}
}

// The stage1 image's etc/hosts-fallback (rootfs/hosts-fallback, packed by
// make image) is the fallback the stage1 itself generates from.
func TestHostsFallbackFileMatches(t *testing.T) {
	b, err := os.ReadFile("../rootfs/hosts-fallback")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != HostsFallback {
		t.Fatalf("rootfs/hosts-fallback differs from podspec.HostsFallback:\n%s", b)
	}
	if got := string(HostsContent("box")); !strings.Contains(got, "\n127.0.0.1 localhost localhost.domain localhost4 localhost4.localdomain4 box\n") {
		t.Fatalf("HostsContent: no hostname on the 127.0.0.1 line:\n%s", got)
	}
}
