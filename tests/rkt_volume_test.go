package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// volWithSubmount makes a host volume directory with a tmpfs mounted
// below it (unmounted with the test's directory), as a host's /home or
// /mnt often has.
func volWithSubmount(t *testing.T, r *rktEnv) string {
	t.Helper()
	vol := filepath.Join(r.dir, "vol")
	must(t, os.MkdirAll(filepath.Join(vol, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(vol, "in"), []byte("top"), 0o644))
	must(t, unix.Mount("tmpfs", filepath.Join(vol, "sub"), "tmpfs", 0, "size=1m"))
	must(t, os.WriteFile(filepath.Join(vol, "sub/marker"), []byte("below"), 0o644))
	return vol
}

// A read-only volume is read-only all the way down: the host's mounts
// below its source, which a recursive bind brings along, too.
func TestRktVolumeReadOnlyIsRecursive(t *testing.T) {
	r := newRkt(t)
	vol := volWithSubmount(t, r)
	img := r.aci("ro", nil, nil)
	out, errOut, code := r.run("--volume=v,kind=host,source="+vol+",readOnly=true", img,
		"--mount=volume=v,target=/mnt", "--exec=/bin/probe", "--", "cat", "/mnt/sub/marker", "+", "write", "/mnt/sub/marker", "pwned")
	if code != 99 || !hasLine(out, "^cat below$") || !strings.Contains(errOut, "read-only file system") {
		t.Fatalf("write below a read-only volume: exit %d, want 99 (EROFS)\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, "sub/marker")); string(b) != "below" {
		t.Fatalf("the host's file below a read-only volume was changed: %q", b)
	}
}

// recursive=false binds the volume alone: what is mounted below its source
// on the host is not there.
func TestRktVolumeNotRecursive(t *testing.T) {
	r := newRkt(t)
	vol := volWithSubmount(t, r)
	img := r.aci("norec", nil, nil)
	out, errOut, code := r.run("--volume=v,kind=host,source="+vol+",recursive=false", img,
		"--mount=volume=v,target=/mnt", "--exec=/bin/probe", "--", "cat", "/mnt/in", "+", "stat", "/mnt/sub/marker")
	if code != 0 || !hasLine(out, "^cat top$") || !hasLine(out, "^stat /mnt/sub/marker error ") {
		t.Fatalf("recursive=false: exit %d, want the top only\n%s%s", code, out, errOut)
	}
	out, errOut, code = r.run("--volume=v,kind=host,source="+vol, img,
		"--mount=volume=v,target=/mnt", "--exec=/bin/probe", "--", "cat", "/mnt/sub/marker")
	if code != 0 || !hasLine(out, "^cat below$") {
		t.Fatalf("recursive by default: exit %d\n%s%s", code, out, errOut)
	}
}

// A relative mount target is taken from the app's root.
func TestRktVolumeRelativeTarget(t *testing.T) {
	r := newRkt(t)
	vol := filepath.Join(r.dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	must(t, os.WriteFile(filepath.Join(vol, "in"), []byte("rel"), 0o644))
	img := r.aci("rel", nil, nil)
	out, errOut, code := r.run("--volume=v,kind=host,source="+vol, img,
		"--mount=volume=v,target=srv/data", "--exec=/bin/probe", "--", "cat", "/srv/data/in")
	if code != 0 || !hasLine(out, "^cat rel$") {
		t.Fatalf("relative target: exit %d\n%s%s", code, out, errOut)
	}
}

// An image mountPoint without a pod volume gets an empty volume of its
// own (rkt's implicit volume); in a Docker-converted image it starts with
// what the image has there.
func TestRktVolumeImplicit(t *testing.T) {
	r := newRkt(t)
	files := map[string]aciFile{"data": {Mode: 0o40755}, "data/seed": {Mode: 0o644, Body: "from-image"}}
	mp := []map[string]any{{"name": "data", "path": "/data"}}
	plain := r.aci("plain", map[string]any{"mountPoints": mp,
		"exec": []string{"/bin/probe", "stat", "/data/seed", "+", "write", "/data/new", "x", "+", "mounts"}}, files)
	out, errOut, code := r.run(plain)
	if code != 0 || !hasLine(out, "^stat /data/seed error ") || !hasLine(out, "^mounts /data ") {
		t.Fatalf("implicit empty volume: exit %d\n%s%s", code, out, errOut)
	}
	docker := r.aci("docker", map[string]any{"mountPoints": mp,
		"exec": []string{"/bin/probe", "cat", "/data/seed", "+", "write", "/data/new", "x", "+", "mounts"}}, files)
	// The annotation docker2aci puts on the images it converts.
	patchManifest(t, docker, `"annotations":[{"name":"appc.io/docker/repository","value":"example/x"}],`)
	out, errOut, code = r.run(docker)
	if code != 0 || !hasLine(out, "^cat from-image$") || !hasLine(out, "^mounts /data ") {
		t.Fatalf("Docker implicit volume: exit %d\n%s%s", code, out, errOut)
	}
}

// rkt app add --mnt-volume: a volume of the app's own (mounts[].appVolume).
func TestRktAppInlineVolume(t *testing.T) {
	r := newRkt(t)
	vol := filepath.Join(r.dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	must(t, os.WriteFile(filepath.Join(vol, "in"), []byte("inline"), 0o644))
	img := r.aci("mounter", map[string]any{"exec": []string{"/bin/probe", "cat", "/opt/in", "+", "sleep", "1h"}}, nil)
	r.rkt("fetch", img)
	p := r.start("app", "sandbox", "--stage1-path="+filepath.Join(repoRoot, "build/stage1.aci"), "--net=none")
	r.rkt("app", "add", p.UUID, "pod1.test/mounter", "--name=mounter", "--mnt-volume=name=test,kind=host,source="+vol+",target=/opt")
	r.rkt("app", "start", p.UUID, "--app=mounter")
	r.appPid(p.UUID, "mounter")
	// Running is its exec; its line comes after: the stop must not end
	// it before it has read the volume.
	waitFor(t, eventDeadline, "the app's line", func() bool { return hasLine(p.out.String(), "^cat ") })
	r.rkt("stop", p.UUID)
	p.wait(t)
	if !hasLine(p.out.String(), "^cat inline$") {
		t.Fatalf("inline volume: %s%s", p.out, p.errb)
	}
}

// /etc/hosts and /etc/hostname as rkt's stage1 gives them: the generated
// hosts file (rkt's format, with the hostname) only when the image has
// none, a volume on /etc/hosts wins, and every app has /etc/hostname.
func TestRktEtcHostsAndHostname(t *testing.T) {
	r := newRkt(t)
	bare := r.aci("bare", map[string]any{"exec": []string{"/bin/probe", "cat", "/etc/hosts", "+", "cat", "/etc/hostname"}}, nil)
	out, errOut, code := r.run("--hostname=box", bare)
	if code != 0 || !hasLine(out, "^cat 127.0.0.1 localhost localhost.domain localhost4 localhost4.localdomain4 box$") || !hasLine(out, "^cat box$") {
		t.Fatalf("fallback hosts and hostname: exit %d\n%s%s", code, out, errOut)
	}
	own := r.aci("own", map[string]any{"exec": []string{"/bin/probe", "cat", "/etc/hosts"}},
		map[string]aciFile{"etc/hosts": {Mode: 0o644, Body: "10.9.8.7 mine\n"}})
	out, errOut, code = r.run(own)
	if code != 0 || !hasLine(out, "^cat 10.9.8.7 mine$") || hasLine(out, "localhost4") {
		t.Fatalf("the image's /etc/hosts must win: exit %d\n%s%s", code, out, errOut)
	}
	hosts := filepath.Join(r.dir, "hosts")
	must(t, os.WriteFile(hosts, []byte("<<<preexisting etc>>>\n"), 0o600))
	out, errOut, code = r.run("--volume=hosts,kind=host,source="+hosts, bare, "--mount=volume=hosts,target=/etc/hosts")
	if code != 0 || !hasLine(out, "^cat <<<preexisting etc>>>$") {
		t.Fatalf("a volume on /etc/hosts must win: exit %d\n%s%s", code, out, errOut)
	}
}

// A volume's readOnly, when given, overrides the image's mountPoint either
// way, as in rkt; without it the mountPoint's readOnly holds.
func TestRktVolumeReadOnlyOverridesMountPoint(t *testing.T) {
	r := newRkt(t)
	vol := filepath.Join(r.dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	img := r.aci("mp", map[string]any{"mountPoints": []map[string]any{{"name": "dir1", "path": "/dir1", "readOnly": true}},
		"exec": []string{"/bin/probe", "write", "/dir1/file", "host:zaz"}}, nil)
	out, errOut, code := r.run("--volume=dir1,kind=host,source="+vol+",readOnly=false", img)
	if code != 0 {
		t.Fatalf("readOnly=false volume on a read-only mountPoint: exit %d\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, "file")); string(b) != "host:zaz" {
		t.Fatalf("the write did not reach the host: %q", b)
	}
	out, errOut, code = r.run("--volume=dir1,kind=host,source="+vol, img)
	if code != 99 || !strings.Contains(errOut, "read-only file system") {
		t.Fatalf("read-only mountPoint, volume without readOnly: exit %d, want 99 (EROFS)\n%s%s", code, out, errOut)
	}
}

// A host volume whose source is a symlink (to a directory or a file,
// relative or absolute, or a path through one) is the file the link names,
// as in rkt's stage1, which resolves the source on the host.
func TestRktVolumeSymlinkSource(t *testing.T) {
	r := newRkt(t)
	vol := filepath.Join(r.dir, "vol")
	must(t, os.Mkdir(vol, 0o755))
	must(t, os.WriteFile(filepath.Join(vol, "in"), []byte("through-link"), 0o644))
	must(t, os.Symlink("vol", filepath.Join(r.dir, "dirlink")))
	must(t, os.Symlink(filepath.Join(vol, "in"), filepath.Join(r.dir, "filelink")))
	img := r.aci("symsrc", nil, nil)
	out, errOut, code := r.run("--volume=d,kind=host,source="+filepath.Join(r.dir, "dirlink"),
		"--volume=f,kind=host,source="+filepath.Join(r.dir, "filelink"),
		"--volume=p,kind=host,source="+filepath.Join(r.dir, "dirlink/in"), img,
		"--mount=volume=d,target=/d", "--mount=volume=f,target=/f", "--mount=volume=p,target=/p",
		"--exec=/bin/probe", "--", "cat", "/d/in", "+", "cat", "/f", "+", "cat", "/p", "+", "write", "/d/new", "x")
	if code != 0 || strings.Count(out, "cat through-link\n") != 3 {
		t.Fatalf("symlink sources: exit %d, want the linked files\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(vol, "new")); err != nil {
		t.Fatalf("a write through the directory link's volume did not reach the directory: %v", err)
	}
}
