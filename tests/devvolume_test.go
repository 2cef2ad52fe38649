package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// rkt's Documentation/block-devices.md mounts a device volume on a node
// of its own under /dev (--mount volume=fuse,target=/dev/fuse): the node
// is the host's device, usable as the volume allows, and on the app's
// device allow-list (with read and write; read only for a read-only
// volume); nothing else may be made or opened of it.
func TestRktDeviceVolumeOnDev(t *testing.T) {
	for _, dev := range []string{"/dev/full", "/dev/loop-control"} {
		if _, err := os.Stat(dev); err != nil {
			t.Fatalf("the test needs %s on the host: %v", dev, err)
		}
	}
	r := newRkt(t)
	img := r.aci("devon", nil, nil)
	out, errOut, code := r.run("--volume=full,kind=host,source=/dev/full", "--volume=lc,kind=host,source=/dev/loop-control", img,
		"--mount=volume=full,target=/dev/sub/full", "--mount=volume=lc,target=/dev/loop-control", "--exec=/bin/probe", "--",
		"rw", "/dev/sub/full", "+", "open-rw", "/dev/loop-control", "+", "mknod", "c", "10", "237", "/tmp/lc", "+", "rw", "/dev/null")
	// /dev/full: a write fails with ENOSPC, a read gives zeros.
	if code != 0 || !hasLine(out, "^rw /dev/sub/full write ENOSPC read ok 00000000$") || !hasLine(out, "^open-rw /dev/loop-control ok$") ||
		!hasLine(out, "^mknod /tmp/lc EPERM$") || !hasLine(out, "^rw /dev/null write ok read ok $") {
		t.Fatalf("device volumes on /dev: exit %d, want them usable\n%s%s", code, out, errOut)
	}
	out, errOut, code = r.run("--volume=lc,kind=host,source=/dev/loop-control,readOnly=true", img,
		"--mount=volume=lc,target=/dev/loop-control", "--exec=/bin/probe", "--", "open-read", "/dev/loop-control", "+", "open-rw", "/dev/loop-control")
	if code != 0 || !hasLine(out, "^open-read /dev/loop-control ok$") || !hasLine(out, "^open-rw /dev/loop-control EPERM$") {
		t.Fatalf("read-only device volume on /dev: exit %d, want it read only\n%s%s", code, out, errOut)
	}
}

// A block device on /dev is the app's that mounts it, read only as its
// volume says, and no other app's: another app of the pod can neither
// make nor open it, nor can the app itself make another node of it.
func TestRktBlockDeviceOnDevOnlyWhereMounted(t *testing.T) {
	const dev = "/dev/loop0" // 7:0; opened only, never read
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("the test needs the block device %s on the host: %v", dev, err)
	}
	r := newRkt(t)
	a, b := r.aci("blka", nil, nil), r.aci("blkb", nil, nil)
	out, errOut, code := r.run("--volume=blk,kind=host,source="+dev+",readOnly=true",
		a, "--mount=volume=blk,target=/dev/blk", "--exec=/bin/probe", "--",
		"open-read", "/dev/blk", "+", "open-rw", "/dev/blk", "+", "mknod", "b", "7", "0", "/tmp/mine", "---",
		b, "--exec=/bin/probe", "--", "mknod", "b", "7", "0", "/tmp/theirs", "+", "stat", "/dev/blk")
	for _, want := range []string{"^open-read /dev/blk ok$", "^open-rw /dev/blk EPERM$", "^mknod /tmp/mine EPERM$",
		"^mknod /tmp/theirs EPERM$", "^stat /dev/blk error "} {
		if !hasLine(out, want) {
			t.Fatalf("block device volume on /dev: exit %d, no line %q\n%s%s", code, want, out, errOut)
		}
	}
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

// Anything else on /dev (and on /proc, /sys) is refused before anything
// starts, 254, with one line naming the app's mounts and the target.
func TestDevTargetsRefused(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	must(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, c := range []struct{ source, target, want string }{
		{dir, "/dev", `target "/dev" is the app's /dev itself`},
		{"/dev/full", "/dev/pts/x", `target "/dev/pts/x" would cover the app's /dev/pts`},
		{"/dev/full", "/dev/console", `target "/dev/console" would cover the app's /dev/console`},
		{"/dev/full", "/dev/shm", `target "/dev/shm": only a directory volume may cover /dev/shm`},
		{file, "/dev/x", `target "/dev/x" is on /dev: only a host volume whose source is a device node`},
		{dir, "/dev/shm/x", `target "/dev/shm/x" is on /dev: only a host volume whose source is a device node`},
		{"/dev/full", "/proc/full", `target "/proc/full" is on /proc`},
		{"/dev/full", "/sys/full", `target "/sys/full" is on /sys`},
	} {
		out, errOut, code := pod1(t, data, "run", "--stage1-path="+stage1ACI(t), "--net=none",
			"--volume=v,kind=host,source="+c.source, img, "--mount=volume=v,target="+c.target, "--exec=/bin/probe", "--", "exit", "0")
		if code != 254 || !strings.Contains(errOut, `app "probe": mounts: `+c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%s on %s: exit %d, want 254 and one line with %q\n%s%s", c.source, c.target, code, c.want, out, errOut)
		}
	}
}
