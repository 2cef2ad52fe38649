package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// entry is one tar entry for test archives.
type entry struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	uid, gid int
}

func buildTar(t *testing.T, entries []entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if e.typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode,
			Uid: e.uid, Gid: e.gid, Size: int64(len(e.body)),
			ModTime: time.Unix(1500000000, 0),
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %s: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatalf("tar body %s: %v", e.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// escapeSetup returns an extraction target and a sibling "outside" dir
// that must stay empty whatever the archive says.
func escapeSetup(t *testing.T) (dest, outside string) {
	t.Helper()
	base := t.TempDir()
	dest = filepath.Join(base, "a", "b", "dest")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{dest, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dest, outside
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s: unexpected entry %q written outside the target", dir, e.Name())
	}
}

// assertOnly checks that dir holds exactly the named entry.
func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != name {
		t.Errorf("%s holds %v, want only %q", dir, ents, name)
	}
}

func TestExtractRefusesEscapes(t *testing.T) {
	needRoot(t)
	cases := []struct {
		name    string
		entries func(outside string) []entry
		wantErr error // nil: extraction may succeed but must stay inside
	}{
		{"dotdot", func(string) []entry {
			return []entry{{name: "../x", typ: tar.TypeReg, body: "x"}}
		}, ErrDotDot},
		{"dotdot-deep", func(string) []entry {
			return []entry{{name: "rootfs/../../../outside/x", typ: tar.TypeReg, body: "x"}}
		}, ErrDotDot},
		{"absolute", func(outside string) []entry {
			return []entry{{name: filepath.Join(outside, "abs"), typ: tar.TypeReg, body: "x"}}
		}, ErrAbsolutePath},
		{"symlink-abs-then-child", func(outside string) []entry {
			return []entry{
				{name: "rootfs/", typ: tar.TypeDir},
				{name: "rootfs/evil", typ: tar.TypeSymlink, link: outside},
				{name: "rootfs/evil/x", typ: tar.TypeReg, body: "x"},
			}
		}, nil},
		{"symlink-tmp-then-child", func(string) []entry {
			return []entry{
				{name: "rootfs/", typ: tar.TypeDir},
				{name: "rootfs/evil", typ: tar.TypeSymlink, link: "/tmp"},
				{name: "rootfs/evil/pod1-extract-escape-probe", typ: tar.TypeReg, body: "x"},
			}
		}, nil},
		{"symlink-relative-then-child", func(string) []entry {
			return []entry{
				{name: "rootfs/", typ: tar.TypeDir},
				{name: "rootfs/up", typ: tar.TypeSymlink, link: "../../../../outside"},
				{name: "rootfs/up/x", typ: tar.TypeReg, body: "x"},
			}
		}, nil},
		{"symlink-then-dir-over-it", func(outside string) []entry {
			return []entry{
				{name: "rootfs/", typ: tar.TypeDir},
				{name: "rootfs/d", typ: tar.TypeSymlink, link: outside},
				{name: "rootfs/d", typ: tar.TypeDir, mode: 0o777},
				{name: "rootfs/d/x", typ: tar.TypeReg, body: "x"},
			}
		}, nil},
		{"symlink-then-file-over-it", func(outside string) []entry {
			return []entry{
				{name: "rootfs/", typ: tar.TypeDir},
				{name: "rootfs/f", typ: tar.TypeSymlink, link: filepath.Join(outside, "f")},
				{name: "rootfs/f", typ: tar.TypeReg, body: "x"},
			}
		}, nil},
		{"hardlink-dotdot", func(string) []entry {
			return []entry{
				{name: "rootfs/", typ: tar.TypeDir},
				{name: "rootfs/h", typ: tar.TypeLink, link: "../../outside/secret"},
			}
		}, ErrDotDot},
		{"hardlink-through-symlink", func(outside string) []entry {
			return []entry{
				{name: "rootfs/", typ: tar.TypeDir},
				{name: "rootfs/evil", typ: tar.TypeSymlink, link: outside},
				{name: "rootfs/h", typ: tar.TypeLink, link: "rootfs/evil/secret"},
			}
		}, os.ErrNotExist},
		{"outside-aci-layout", func(string) []entry {
			return []entry{{name: "etc/passwd", typ: tar.TypeReg, body: "x"}}
		}, ErrNotACI},
		{"manifest-symlink", func(string) []entry {
			return []entry{{name: "manifest", typ: tar.TypeSymlink, link: "/etc/shadow"}}
		}, ErrNotACI},
		{"device", func(string) []entry {
			return []entry{{name: "rootfs/", typ: tar.TypeDir}, {name: "rootfs/sda", typ: tar.TypeBlock}}
		}, ErrSpecialFile},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dest, outside := escapeSetup(t)
			// A file the hardlink cases try to reach.
			secret := filepath.Join(outside, "secret")
			if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
				t.Fatal(err)
			}
			_ = os.Remove(filepath.Join("/tmp", "pod1-extract-escape-probe"))
			err := Extract(buildTar(t, tc.entries(outside)), dest)
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Extract error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && err != nil {
				t.Logf("Extract refused: %v", err)
			}
			if err := os.Remove(secret); err != nil {
				t.Fatal(err)
			}
			assertEmpty(t, outside)
			assertOnly(t, filepath.Dir(dest), "dest")
			if _, err := os.Stat(filepath.Join("/tmp", "pod1-extract-escape-probe")); err == nil {
				_ = os.Remove(filepath.Join("/tmp", "pod1-extract-escape-probe"))
				t.Error("entry written through symlink into the host /tmp")
			}
		})
	}
}

func TestExtractInRootResolution(t *testing.T) {
	needRoot(t)
	// A symlink to an absolute path is legitimate image content; entries
	// below it land under the same path inside the rootfs, as an app
	// would see them after chroot. Hardlinks resolve the same way.
	dest, outside := escapeSetup(t)
	err := Extract(buildTar(t, []entry{
		{name: "rootfs/tmp/", typ: tar.TypeDir},
		{name: "rootfs/evil", typ: tar.TypeSymlink, link: "/tmp"},
		{name: "rootfs/evil/x", typ: tar.TypeReg, body: "inside"},
		{name: "rootfs/rel", typ: tar.TypeSymlink, link: "../../../../tmp"},
		{name: "rootfs/rel/y", typ: tar.TypeReg, body: "inside too"},
		{name: "rootfs/h", typ: tar.TypeLink, link: "rootfs/evil/x"},
	}), dest)
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dest, "rootfs", "tmp", "y")); err != nil || string(got) != "inside too" {
		t.Fatalf("relative symlink resolution: %q, %v", got, err)
	}
	var a, b unix.Stat_t
	if unix.Lstat(filepath.Join(dest, "rootfs", "h"), &a) != nil || unix.Lstat(filepath.Join(dest, "rootfs", "tmp", "x"), &b) != nil || a.Ino != b.Ino {
		t.Fatalf("hardlink through in-root symlink not linked to rootfs/tmp/x")
	}
	got, err := os.ReadFile(filepath.Join(dest, "rootfs", "tmp", "x"))
	if err != nil || string(got) != "inside" {
		t.Fatalf("in-root file: %q, %v", got, err)
	}
	link, err := os.Readlink(filepath.Join(dest, "rootfs", "evil"))
	if err != nil || link != "/tmp" {
		t.Fatalf("symlink kept verbatim: %q, %v", link, err)
	}
	assertEmpty(t, outside)
}

func TestExtractPreserves(t *testing.T) {
	needRoot(t)
	dest := t.TempDir()
	err := Extract(buildTar(t, []entry{
		{name: "./", typ: tar.TypeDir},
		{name: "manifest", typ: tar.TypeReg, body: "{}"},
		{name: "rootfs/", typ: tar.TypeDir, mode: 0o755},
		{name: "rootfs/bin/", typ: tar.TypeDir, mode: 0o711, uid: 5, gid: 6},
		{name: "rootfs/bin/suid", typ: tar.TypeReg, body: "#!", mode: 0o4755, uid: 1000, gid: 1001},
		{name: "rootfs/bin/hard", typ: tar.TypeLink, link: "rootfs/bin/suid"},
		{name: "rootfs/bin/sym", typ: tar.TypeSymlink, link: "suid", uid: 7, gid: 8},
		{name: "rootfs/tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "rootfs/implicit/parent/file", typ: tar.TypeReg, body: "p", mode: 0o600},
	}), dest)
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	check := func(rel string, mode, uid, gid uint32) unix.Stat_t {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dest, rel), &st); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if st.Mode&0o7777 != mode || st.Uid != uid || st.Gid != gid {
			t.Errorf("%s: mode %#o uid %d gid %d, want %#o %d %d", rel, st.Mode&0o7777, st.Uid, st.Gid, mode, uid, gid)
		}
		return st
	}
	check("rootfs/bin", 0o711, 5, 6)
	suid := check("rootfs/bin/suid", 0o4755, 1000, 1001)
	hard := check("rootfs/bin/hard", 0o4755, 1000, 1001)
	if suid.Ino != hard.Ino || suid.Nlink != 2 {
		t.Errorf("hardlink: inodes %d/%d nlink %d", suid.Ino, hard.Ino, suid.Nlink)
	}
	sym := check("rootfs/bin/sym", 0o777, 7, 8)
	if sym.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("sym is not a symlink")
	}
	check("rootfs/tmp", 0o1777, 0, 0)
	check("rootfs/implicit/parent/file", 0o600, 0, 0)
	if suid.Mtim.Sec != 1500000000 {
		t.Errorf("mtime %d not preserved", suid.Mtim.Sec)
	}
}

// needRoot skips a test as another user: Extract gives the files their
// owners from the archive (chown).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: Extract chowns the files to the archive's owners")
	}
}
