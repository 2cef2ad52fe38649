package tests

import (
	"os"
	"testing"
)

// A host volume whose source is a device node is on the device allow-list
// of the apps that mount it, as rkt's stage1 puts it in DeviceAllow=: read
// and write, read only for a read-only mount, never mknod. Without the
// volume the same device is refused, and --insecure-options=paths (the
// stage1's --disable-paths) lifts the allow-list, as it drops rkt's
// DevicePolicy=.
func TestRktDeviceVolumeAndInsecurePaths(t *testing.T) {
	const dev = "/dev/loop-control" // 10:237, off the allow-list
	if _, err := os.Stat(dev); err != nil {
		t.Fatalf("the test needs %s on the host: %v", dev, err)
	}
	r := newRkt(t)
	img := r.aci("devs", nil, nil)
	probeArgs := func(extra ...string) []string {
		return append([]string{"--exec=/bin/probe", "--"}, extra...)
	}
	out, errOut, code := r.run(append([]string{"--volume=lc,kind=host,source=" + dev, img, "--mount=volume=lc,target=/lc"},
		probeArgs("open-rw", "/lc", "+", "mknod", "c", "10", "237", "/tmp/lc", "+", "mknod", "c", "5", "2", "/tmp/ptmx")...)...)
	if code != 0 || !hasLine(out, "^open-rw /lc ok$") || !hasLine(out, "^mknod /tmp/lc EPERM$") || !hasLine(out, "^mknod /tmp/ptmx EPERM$") {
		t.Fatalf("device volume: exit %d, want it opened, and no node made\n%s%s", code, out, errOut)
	}
	out, errOut, code = r.run(append([]string{"--volume=lc,kind=host,source=" + dev + ",readOnly=true", img, "--mount=volume=lc,target=/lc"},
		probeArgs("open-read", "/lc", "+", "open-rw", "/lc")...)...)
	if code != 0 || !hasLine(out, "^open-read /lc ok$") || !hasLine(out, "^open-rw /lc E") || hasLine(out, "^open-rw /lc ok$") {
		t.Fatalf("read-only device volume: exit %d, want read only\n%s%s", code, out, errOut)
	}
	out, errOut, code = r.run(append([]string{img}, probeArgs("mknod", "c", "10", "237", "/tmp/lc", "+", "open-rw", "/tmp/lc")...)...)
	if code != 0 || !hasLine(out, "^mknod /tmp/lc EPERM$") {
		t.Fatalf("no volume: exit %d, want the device refused\n%s%s", code, out, errOut)
	}
	out, errOut, code = r.exec(rktTimeout, nil, r.runArgs("run", append([]string{"--insecure-options=image,paths", img},
		probeArgs("mknod", "c", "10", "237", "/tmp/lc", "+", "open-rw", "/tmp/lc", "+", "mknod", "c", "5", "2", "/tmp/ptmx")...))...)
	if code != 0 || !hasLine(out, "^mknod /tmp/lc ok$") || !hasLine(out, "^open-rw /tmp/lc ok$") || !hasLine(out, "^mknod /tmp/ptmx ok$") {
		t.Fatalf("--insecure-options=paths: exit %d, want no allow-list\n%s%s", code, out, errOut)
	}
}
