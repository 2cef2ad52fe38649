package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rkt run: the pod's exit code is the app's, the status file and rkt's
// status say the same, and both output streams reach rkt's caller.
func TestRktRunExitCode(t *testing.T) {
	r := newRkt(t)
	img := r.aci("exit3", map[string]any{"exec": []string{"/bin/probe", "hostname", "+", "exit", "3"}}, nil)
	uf := filepath.Join(r.dir, "uuid")
	out, errOut, code := r.run("--uuid-file-save="+uf, img)
	if code != 3 {
		t.Fatalf("rkt run: exit %d, want 3\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	b, err := os.ReadFile(uf)
	must(t, err)
	uuid := strings.TrimSpace(string(b))
	if !hasLine(out, "hostname rkt-"+uuid+"$") {
		t.Errorf("hostname: want rkt-%s in %q", uuid, out)
	}
	s := r.status(uuid)
	if s.State != "exited" || s.appExit("exit3") != 3 {
		t.Errorf("rkt status: %+v, want exited with app exit3 = 3", s)
	}
	txt := r.rkt("status", uuid)
	if !hasLine(txt, "^state=exited$") || !hasLine(txt, "^app-exit3=3$") {
		t.Errorf("rkt status (text):\n%s", txt)
	}
	list := r.rkt("list", "--full", "--no-legend")
	if !strings.Contains(list, uuid) || !strings.Contains(list, "exited") {
		t.Errorf("rkt list: %q, want %s exited", list, uuid)
	}
}

// --exec replaces the image's command; a command that does not exist is
// 127 (as with rkt's stage1), a signal death 128+N.
func TestRktRunExec(t *testing.T) {
	r := newRkt(t)
	img := r.aci("exec", nil, nil)
	if out, errOut, code := r.run(img, "--exec=/bin/probe", "--", "exit", "7"); code != 7 {
		t.Fatalf("--exec: exit %d, want 7\n%s%s", code, out, errOut)
	}
	if out, errOut, code := r.run(img, "--exec=/nonexistent"); code != 127 {
		t.Fatalf("--exec=/nonexistent: exit %d, want 127\n%s%s", code, out, errOut)
	}
	if out, errOut, code := r.run(img, "--exec=/bin/probe", "--", "kill-self", "9"); code != 137 {
		t.Fatalf("SIGKILL: exit %d, want 137\n%s%s", code, out, errOut)
	}
}

// --user/--group override the image's, by number or by name from the
// image's /etc/passwd and /etc/group.
func TestRktRunUserGroup(t *testing.T) {
	r := newRkt(t)
	img := r.aci("ids", map[string]any{"exec": []string{"/bin/probe", "ids"}, "user": "1000", "group": "1000"}, nil)
	out, errOut, code := r.run(img)
	if code != 0 || !hasLine(out, `ids uid=1000 gid=1000 `) {
		t.Fatalf("image user: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = r.run(img, "--user=user", "--group=staff")
	if code != 0 || !hasLine(out, `ids uid=1000 gid=50 `) {
		t.Fatalf("--user=user --group=staff: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = r.run(img, "--user=4242", "--group=4343")
	if code != 0 || !hasLine(out, `ids uid=4242 gid=4343 `) {
		t.Fatalf("--user=4242 --group=4343: exit %d\n%s%s", code, out, errOut)
	}
}

// Host volumes: read-write and read-only, through --volume and --mount.
func TestRktRunVolumes(t *testing.T) {
	r := newRkt(t)
	vol := filepath.Join(r.dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	must(t, os.WriteFile(filepath.Join(vol, "in"), []byte("from-host"), 0o644))
	img := r.aci("vol", nil, nil)
	out, errOut, code := r.run("--volume=v,kind=host,source="+vol, img,
		"--mount=volume=v,target=/mnt", "--exec=/bin/probe", "--", "cat", "/mnt/in", "+", "write", "/mnt/out", "from-app")
	if code != 0 || !hasLine(out, "^cat from-host$") {
		t.Fatalf("rw volume: exit %d\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, "out")); string(b) != "from-app" {
		t.Errorf("the app's write did not reach the host: %q", b)
	}
	out, errOut, code = r.run("--volume=v,kind=host,source="+vol+",readOnly=true", img,
		"--mount=volume=v,target=/mnt", "--exec=/bin/probe", "--", "write", "/mnt/out", "again")
	if code != 99 || !strings.Contains(errOut+out, "read-only file system") {
		t.Fatalf("ro volume: exit %d, want 99 (EROFS)\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, "out")); string(b) != "from-app" {
		t.Errorf("a read-only volume was written: %q", b)
	}
}

// Isolators from the command line: memory and CPU limits reach the app's
// cgroup, the capability set is what --caps-retain says.
func TestRktRunIsolators(t *testing.T) {
	r := newRkt(t)
	img := r.aci("iso", map[string]any{"exec": []string{"/bin/probe", "status"}}, nil)
	out, errOut, code := r.run(img, "--caps-retain=CAP_CHOWN,CAP_KILL")
	if code != 0 {
		t.Fatalf("--caps-retain: exit %d\n%s%s", code, out, errOut)
	}
	// CAP_CHOWN is bit 0, CAP_KILL bit 5.
	if !hasLine(out, `^status CapBnd: 0000000000000021$`) {
		t.Errorf("--caps-retain=CAP_CHOWN,CAP_KILL: bounding set in\n%s", out)
	}
	out, errOut, code = r.run(img, "--memory=64M", "--cpu=250m", "--exec=/bin/probe", "--", "cat", "/proc/self/cgroup")
	if code != 0 {
		t.Fatalf("--memory --cpu: exit %d\n%s%s", code, out, errOut)
	}
}

// --private-users: the app's root is not the host's.
func TestRktRunPrivateUsers(t *testing.T) {
	r := newRkt(t)
	img := r.aci("userns", map[string]any{"exec": []string{"/bin/probe", "cat", "/proc/self/uid_map", "+", "ids"}}, nil)
	out, errOut, code := r.run("--private-users", "--no-overlay", img)
	if code != 0 || !hasLine(out, `ids uid=0 gid=0 `) {
		t.Fatalf("--private-users: exit %d\n%s%s", code, out, errOut)
	}
	m := lines(out, "cat ")
	if len(m) != 1 || strings.Fields(m[0])[2] == "0" {
		t.Errorf("uid_map %q: want root mapped to a host uid other than 0", m)
	}
}
