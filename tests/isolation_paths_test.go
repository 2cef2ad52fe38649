package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pod1/pod1/appexec"
)

// hostHas lists the paths of list the host's kernel offers.
func hostHas(list []string) (files, dirs []string) {
	for _, p := range list {
		if fi, err := os.Lstat(p); err == nil {
			if fi.IsDir() {
				dirs = append(dirs, p)
			} else {
				files = append(files, p)
			}
		}
	}
	return files, dirs
}

// T-PATHS-1 (port of rkt's rkt_paths_test.go, threats T13): the kernel's
// memory, symbols, keys, timers and firmware are masked (mode 0, empty),
// /proc/sys, /proc/sysrq-trigger and the other tunables and /sys are
// read-only; a non-root app cannot even open the masks. --disable-paths is
// the negative control.
func TestMaskedAndReadOnlyPaths(t *testing.T) {
	files, dirs := hostHas(appexec.DefaultMaskedPaths)
	if len(files) == 0 || len(dirs) == 0 {
		t.Fatalf("the host offers none of the masked files (%v) or directories (%v)", files, dirs)
	}
	var cmd []string
	for _, p := range append(files, dirs...) {
		cmd = append(cmd, "stat", p, "+")
	}
	for _, d := range dirs {
		cmd = append(cmd, "ls", d, "+")
	}
	cmd = append(cmd, "open-read", files[0], "+", "open-write", "/proc/sys/kernel/hostname", "+", "mounts")
	ro := []string{"/proc/sys/kernel/hostname"}
	if dirs[0] == "/sys/fs" {
		t.Fatal("the host offers no masked directory but /sys/fs, which keeps cgroup/")
	}
	if _, err := os.Stat("/proc/sysrq-trigger"); err == nil {
		cmd = append(cmd, "+", "open-write", "/proc/sysrq-trigger")
		ro = append(ro, "/proc/sysrq-trigger")
	}
	p := newPod(t, []App{
		{Name: "root", Exec: probe(cmd...)},
		{Name: "user", User: "1000", Group: "1000", Exec: probe("open-read", files[0], "+", "ls", dirs[0])},
	}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	out := r.Stdout.String()
	for _, f := range files {
		if !strings.Contains(out, "stat "+f+" mode=100000 ") {
			t.Errorf("%s not masked: %q", f, r.Lines("stat "+f))
		}
	}
	for _, d := range dirs {
		if d == "/sys/fs" && len(cgroupDirs(p)) > 0 {
			// Masked but for the app's own cgroups, read-only
			// (TestAppSeesItsOwnCgroupsReadOnly).
			if !strings.Contains(out, "ls /sys/fs cgroup\n") {
				t.Errorf("/sys/fs shows more than cgroup/: %q", r.Lines("ls /sys/fs"))
			}
			continue
		}
		if !strings.Contains(out, "stat "+d+" mode=40000 ") || !strings.Contains(out, "ls "+d+" \n") {
			t.Errorf("%s not masked: %q %q", d, r.Lines("stat "+d), r.Lines("ls "+d))
		}
	}
	for _, w := range []string{"open-read " + files[0] + " EACCES", "ls " + dirs[0] + " error open " + dirs[0] + ": permission denied"} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("non-root app: missing %q", w)
		}
	}
	for _, f := range ro {
		if !strings.Contains(out, "open-write "+f+" EROFS\n") {
			t.Errorf("%s writable: %q", f, r.Lines("open-write "+f))
		}
	}
	if !strings.Contains(out, "mounts /sys sysfs ro,") {
		t.Errorf("/sys not read-only")
	}

	// Negative control: the same app with --disable-paths sees the kernel's
	// files and may write its (namespaced) hostname.
	p = newPod(t, []App{{Name: "root", Exec: probe(cmd...)}}, nil)
	r = runPod(t, p, RunOpts{Args: []string{"--net=none", "--disable-paths"}})
	out = r.Stdout.String()
	if r.Code != 0 || strings.Contains(out, "mode=100000 ") || !strings.Contains(out, "open-write /proc/sys/kernel/hostname ok") ||
		!strings.Contains(out, "mounts /sys sysfs rw,") || !strings.Contains(r.Stderr.String(), "warning: --disable-paths") {
		t.Errorf("--disable-paths: exit %d\n%s\n%s", r.Code, out, r.Stderr)
	}
}

// readOnlyRootFS makes the image read-only, not the app's volumes or /dev.
func TestReadOnlyRootFS(t *testing.T) {
	vol := t.TempDir()
	mp, vols := volume(vol)
	cmd := probe("open-write", "/etc/passwd", "+", "open-write", "/dev/null", "+", "touch", "/vol/written", "+", "mounts")
	p := isoPod(t, []App{{Name: "ro", Exec: cmd, MPoints: mp}, {Name: "rw", Exec: probe("open-write", "/etc/passwd")}}, nil, vols, "ro")
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	got := strings.Join(r.Lines("open-write "), "\n")
	if !strings.Contains(got, "open-write /etc/passwd EROFS") || !strings.Contains(got, "open-write /etc/passwd ok") ||
		!strings.Contains(got, "open-write /dev/null ok") {
		t.Fatalf("writes: %q", got)
	}
	if _, err := os.Stat(filepath.Join(vol, "written")); err != nil {
		t.Fatalf("volume not writable: %v", err)
	}
	if !strings.Contains(r.Stdout.String(), "mounts / ") || !strings.Contains(r.Line(t, "mounts / "), " ro,") {
		t.Errorf("root mount: %q", r.Line(t, "mounts / "))
	}
}
