package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// halfOfRAM is tmpfs's default size: half of the host's memory, in pages.
func halfOfRAM(t *testing.T) uint64 {
	var si unix.Sysinfo_t
	must(t, unix.Sysinfo(&si))
	page := uint64(os.Getpagesize())
	return uint64(si.Totalram) * uint64(si.Unit) / page / 2 * page
}

// The pod's apps share one /dev/shm (as in rkt's stage1, where one tmpfs
// was bound into every app): what one writes, the other reads. It is
// tmpfs's default size, half of the host's memory, nosuid, nodev and
// noexec, and world-writable with the sticky bit. The reader waits for a
// second file, written after the first is complete: the first exists as
// soon as it is created, before its bytes are in.
func TestRktDevShmShared(t *testing.T) {
	r := newRkt(t)
	a, b := r.aci("shma", nil, nil), r.aci("shmb", nil, nil)
	out, errOut, code := r.run(
		a, "--exec=/bin/probe", "--", "write", "/dev/shm/from-a", "hello", "+", "write", "/dev/shm/a-done", "", "+",
		"wait-file", "/dev/shm/from-b", "---",
		b, "--exec=/bin/probe", "--", "wait-file", "/dev/shm/a-done", "+", "cat", "/dev/shm/from-a", "+", "write", "/dev/shm/from-b", "x",
		"+", "statfs", "/dev/shm", "+", "stat", "/dev/shm", "+", "mounts")
	if code != 0 || !hasLine(out, "^cat hello$") {
		t.Fatalf("/dev/shm between two apps: exit %d, want the one's file read by the other\n%s%s", code, out, errOut)
	}
	if want := "statfs /dev/shm size=" + strconv.FormatUint(halfOfRAM(t), 10); !hasLine(out, "^"+want+"$") {
		t.Errorf("want %q (half of the host's memory)\n%s", want, out)
	}
	if !hasLine(out, `^stat /dev/shm mode=41777 `) {
		t.Errorf("/dev/shm is not a directory of mode 1777\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^mounts /dev/shm tmpfs (\S+) (\S+)$`).FindStringSubmatch(unprefixed(out))
	if m == nil {
		t.Fatalf("no tmpfs on /dev/shm\n%s", out)
	}
	for _, o := range []string{"rw", "nosuid", "nodev", "noexec"} {
		if !strings.Contains(","+m[1]+",", ","+o+",") {
			t.Errorf("/dev/shm mounted %s, want %s", m[1], o)
		}
	}
}

// pod1/shm-size bounds the pod's /dev/shm; a bad value refuses the pod,
// 254, naming the annotation.
func TestDevShmSizeAnnotation(t *testing.T) {
	apps := []App{{Name: "a", Exec: probe("statfs", "/dev/shm", "+", "write", "/dev/shm/f", "x")}, {Name: "b", Exec: probe("wait-file", "/dev/shm/f", "+", "statfs", "/dev/shm")}}
	p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/shm-size": "3M"}), apps)
	r := runPod(t, p, RunOpts{})
	if r.Code != 0 || len(r.Lines("statfs /dev/shm size=3145728")) != 2 {
		t.Fatalf("pod1/shm-size=3M: exit %d, want both apps' /dev/shm of 3 MiB\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, bad := range []string{"0", "3MB", "-1", "half"} {
		p := newPodRaw(t, manifestAnn(apps, nil, map[string]string{"pod1/shm-size": bad}), apps)
		r := runPod(t, p, RunOpts{})
		if r.Code != 254 || !strings.Contains(r.Stderr.String(), `pod manifest: annotations: annotation pod1/shm-size: "`+bad+`" must be a positive byte count`) {
			t.Errorf("pod1/shm-size=%s: exit %d, want 254 naming it\n%s", bad, r.Code, r.Stderr)
		}
	}
}

// A volume may cover /dev/shm: that app has the volume there, and the
// other apps the pod's.
func TestDevShmVolumeCovers(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	vol := t.TempDir()
	out, errOut, code := pod1(t, data, "run", "--stage1-path="+stage1ACI(t), "--net=none", "--volume=shm,kind=host,source="+vol,
		img, "--name=own", "--mount=volume=shm,target=/dev/shm", "--exec=/bin/probe", "--", "write", "/dev/shm/own", "x", "---",
		img, "--name=pod", "--exec=/bin/probe", "--", "write", "/dev/shm/pod", "y", "+", "ls", "/dev/shm")
	if code != 0 || !hasLine(out, "^ls /dev/shm pod$") {
		t.Fatalf("volume on /dev/shm: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(vol, "own")); err != nil {
		t.Errorf("the volume's app did not write the volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(vol, "pod")); err == nil {
		t.Error("the other app wrote the volume")
	}
}

// Apps in user namespaces (--private-users), root or not, use the pod's
// /dev/shm as any other: it is world-writable with the sticky bit. Each
// app says a file is whole with a second one: the other may otherwise
// find it created and still empty (seen under the emulator).
func TestDevShmPrivateUsers(t *testing.T) {
	data := dataDir(t)
	img := probeACIDir(t)
	out, errOut, code := pod1(t, data, "run", "--stage1-path="+stage1ACI(t), "--net=none", "--private-users=200000:65536",
		img, "--name=root", "--exec=/bin/probe", "--", "write", "/dev/shm/root", "r", "+", "touch", "/dev/shm/root-done",
		"+", "wait-file", "/dev/shm/user-done", "+", "cat", "/dev/shm/user", "---",
		img, "--name=user", "--user=1000", "--group=1000", "--exec=/bin/probe", "--", "wait-file", "/dev/shm/root-done", "+", "cat", "/dev/shm/root",
		"+", "write", "/dev/shm/user", "u", "+", "touch", "/dev/shm/user-done", "+", "owner", "/dev/shm/user")
	if code != 0 || !hasLine(out, "^cat r$") || !hasLine(out, "^cat u$") || !hasLine(out, "^owner /dev/shm/user uid=1000 gid=1000$") {
		t.Fatalf("/dev/shm with --private-users: exit %d\n%s%s", code, out, errOut)
	}
}

// An app added to a running mutable pod gets the pod's /dev/shm.
func TestDevShmAppAdded(t *testing.T) {
	data, uuid := cliSandbox(t)
	img := probeACIDir(t)
	d := "--dir=" + data
	for _, a := range [][]string{
		{"--name=first", "--exec=/bin/probe", "--", "write", "/dev/shm/first", "x", "+", "sleep", "1h"},
		{"--name=later", "--exec=/bin/probe", "--", "wait-file", "/dev/shm/first", "+", "exit", "7"},
	} {
		if code, out := pod1cli(t, nil, append([]string{d, "app", "add", uuid, img}, a...)...); code != 0 {
			t.Fatalf("add %v: %d %s", a, code, out)
		}
		if code, out := pod1cli(t, nil, d, "app", "start", uuid, "--app="+strings.TrimPrefix(a[0], "--name=")); code != 0 {
			t.Fatalf("start %v: %d %s", a, code, out)
		}
	}
	waitFor(t, 10*time.Second, "the later app found the first's file", func() bool {
		s, e := appState(t, data, uuid, "later")
		return s == "exited" && e == "7"
	})
}

// The same through rkt's app API.
func TestRktDevShmAppAdded(t *testing.T) {
	r := newRkt(t)
	first := r.aci("first", map[string]any{"exec": []string{"/bin/probe", "write", "/dev/shm/first", "x", "+", "sleep", "1h"}}, nil)
	later := r.aci("later", map[string]any{"exec": []string{"/bin/probe", "wait-file", "/dev/shm/first", "+", "exit", "7"}}, nil)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	r.rkt("fetch", first, later)
	r.rkt("app", "add", p.UUID, "pod1.test/first", "--name=first")
	r.rkt("app", "start", p.UUID, "--app=first")
	r.rkt("app", "add", p.UUID, "pod1.test/later", "--name=later")
	r.rkt("app", "start", p.UUID, "--app=later")
	waitFor(t, 10*time.Second, "the later app found the first's file", func() bool {
		out, _, _ := r.exec(rktTimeout, nil, "app", "status", p.UUID, "--app=later")
		return hasLine(out, "^exit_code=7$")
	})
	r.rkt("stop", p.UUID)
	p.wait(t)
}
