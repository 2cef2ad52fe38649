package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// pod1 run --private-users does stage0's part: the trees are copied with
// their owners shifted (overlays cannot shift them, so it implies
// --no-overlay), private-users-prepared records the range, and the stage1
// gets the flag. An image file owned by an id past COUNT is refused.
func TestLauncherPrivateUsers(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	uuidFile := filepath.Join(t.TempDir(), "uuid")
	out, errOut, code := pod1(t, data, "run", "--stage1-path="+stage1ACI(t), "--net=none", "--uuid-file-save="+uuidFile,
		"--private-users=200000:65536", img, "--exec=/bin/probe", "--",
		"cat", "/proc/self/uid_map", "+", "owner", "/bin/probe", "+", "touch", "/tmp/mine")
	if code != 0 {
		t.Fatalf("pod1 run: %d\n%s\n%s", code, out, errOut)
	}
	out = unprefixed(out)
	if got := strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " "); got != "cat 0 200000 65536" {
		t.Errorf("uid map %q\n%s", got, out)
	}
	if !strings.Contains(out, "owner /bin/probe uid=0 gid=0\n") {
		t.Errorf("the image's files are not root's inside:\n%s", out)
	}
	uuid, err := os.ReadFile(uuidFile)
	must(t, err)
	podDir := filepath.Join(data, "pods/run", strings.TrimSpace(string(uuid)))
	if b, err := os.ReadFile(filepath.Join(podDir, "private-users-prepared")); err != nil || string(b) != "200000:65536" {
		t.Errorf("private-users-prepared: %q %v", b, err)
	}
	root := filepath.Join(podDir, layout.AppRootfs("probe"))
	for _, f := range []string{"bin/probe", "tmp/mine", "../../../../run"} {
		if u, g := ownerOf(t, filepath.Join(root, f)); u != 200000 || g != 200000 {
			t.Errorf("%s is owned by %d:%d on the host, want 200000:200000", f, u, g)
		}
	}
	if _, err := os.Stat(filepath.Join(podDir, "overlay-prepared")); err == nil {
		t.Error("overlay-prepared: the trees must be copies")
	}

	// An owner the range does not cover.
	must(t, os.Lchown(filepath.Join(img, "rootfs/etc/passwd"), 70000, 0))
	_, errOut, code = pod1(t, data, "run", "--stage1-path="+stage1ACI(t), "--net=none", "--private-users=200000:65536", img)
	if code == 0 || !strings.Contains(errOut, "owner id 70000 is outside the pod's user namespace (0-65535, --private-users)") {
		t.Errorf("an unmappable owner: exit %d, %s", code, errOut)
	}
}

// An app added to a running sandbox made with --private-users is shifted
// and mapped like the pod's first apps (private-users-prepared).
func TestAppAddedToPrivateUsersSandbox(t *testing.T) {
	data, uuid := cliSandbox(t, "--private-users=300000:65536")
	img := probeACIDir(t)
	d := "--dir=" + data
	if code, out := pod1cli(t, nil, d, "app", "add", uuid, img, "--name=late", "--exec=/bin/probe", "--", "sleep", "1h"); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := pod1cli(t, nil, d, "app", "start", uuid, "--app=late"); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	podDir := filepath.Join(data, "pods/run", uuid)
	if u, _ := ownerOf(t, filepath.Join(podDir, layout.AppRootfs("late"), "bin/probe")); u != 300000 {
		t.Errorf("the added app's files are owned by %d on the host, want 300000", u)
	}
	rec, err := status.ReadRecord(filepath.Join(podDir, layout.StatusDir), "late")
	must(t, err)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(rec.Pid) + "/uid_map")
	must(t, err)
	if got := strings.Join(strings.Fields(string(b)), " "); got != "0 300000 65536" {
		t.Errorf("the added app's uid map: %q", got)
	}
}
