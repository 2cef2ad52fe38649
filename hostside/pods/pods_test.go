package pods

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

const (
	uuidA = "11111111-2222-4333-8444-555555555555"
	uuidB = "11111111-9999-4333-8444-555555555555"
)

// mkPod lays out a pod directory the way stage0 and a stage1 leave it.
func mkPod(t *testing.T, data, state, uuid string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(data, "pods", state, uuid)
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hold takes the pod directory's exclusive lock, as a running stage1 does.
func hold(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
}

const manifest = `{"acKind":"PodManifest","acVersion":"1.30.0","apps":[
 {"name":"a","image":{"name":"x.org/a","id":"sha512-aaaa"},"app":{"exec":["/x"],"user":"0","group":"0"}},
 {"name":"b","image":{"name":"x.org/b","id":"sha512-bbbb"},"app":{"exec":["/x"],"user":"0","group":"0"}}],
 "volumes":[],"annotations":[{"name":"coreos.com/rkt/stage1/mutable","value":"false"}]}`

// Every directory and lock condition gives rkt's state.
func TestStates(t *testing.T) {
	cases := []struct {
		dir    string
		locked bool
		want   State
	}{
		{"embryo", false, Embryo}, {"embryo", true, Embryo},
		{"prepare", true, Preparing}, {"prepare", false, AbortedPrepare},
		{"prepared", false, Prepared}, {"prepared", true, Prepared},
		{"run", true, Running}, {"run", false, Exited},
		{"exited-garbage", true, ExitedDeleting}, {"exited-garbage", false, ExitedGarbage},
		{"garbage", true, Deleting}, {"garbage", false, Garbage},
	}
	for _, c := range cases {
		data := t.TempDir()
		dir := mkPod(t, data, c.dir, uuidA, map[string]string{"pod": manifest, "pod-created": ""})
		if c.locked {
			hold(t, dir)
		}
		p, err := Read(data, uuidA)
		if err != nil {
			t.Fatal(err)
		}
		if p.State != c.want {
			t.Errorf("%s locked=%v: state %q, want %q", c.dir, c.locked, p.State, c.want)
		}
	}
}

// Exit codes come from the overlay's upper dir when the pod uses overlays,
// app states and times follow rkt's immutable-pod rules.
func TestAppsFromOverlayUpper(t *testing.T) {
	data := t.TempDir()
	st := "overlay/s1id/upper/rkt/status/"
	mkPod(t, data, "run", uuidA, map[string]string{
		"pod": manifest, "pod-created": "", "pid": "42\n", "overlay-prepared": "",
		"stage1TreeStoreID": "s1id", st + "a": "3\n", st + "b": "garbage",
		// A stale file where a non-overlay pod keeps its statuses
		// must not be read.
		"stage1/rootfs/rkt/status/b": "9\n",
		"appsinfo/a/manifest":        `{"name":"x.org/a","labels":[{"name":"version","value":"1.0"}]}`,
	})
	p, err := Read(data, uuidA)
	if err != nil || p.ManifestErr != nil {
		t.Fatal(err, p.ManifestErr)
	}
	if p.State != Exited || p.Pid != 42 || p.Created.IsZero() || p.Started.IsZero() {
		t.Fatalf("pod %+v", p)
	}
	a, b := p.Apps[0], p.Apps[1]
	if a.State != AppExited || a.ExitCode == nil || *a.ExitCode != 3 || a.ImageName != "x.org/a:1.0" || a.ImageID != "sha512-aaaa" {
		t.Errorf("app a: %+v", a)
	}
	if b.State != AppExited || b.ExitCode != nil || b.ImageName != "" {
		t.Errorf("app b (malformed status): %+v", b)
	}
	if a.StartedAt == nil || !a.StartedAt.Equal(p.Started) || a.FinishedAt != nil {
		t.Errorf("app a times: %+v", a)
	}
}

// A manifest naming an app with a path must not make us read outside the
// status directory.
func TestBadAppName(t *testing.T) {
	data := t.TempDir()
	mkPod(t, data, "run", uuidA, map[string]string{
		"pod": `{"apps":[{"name":"../../etc","image":{"id":"x"}}]}`,
	})
	p, err := Read(data, uuidA)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(p.ManifestErr, errBadAppName) || len(p.Apps) != 0 {
		t.Fatalf("manifest error %v, apps %v", p.ManifestErr, p.Apps)
	}
}

func TestResolveAndList(t *testing.T) {
	data := t.TempDir()
	mkPod(t, data, "run", uuidA, map[string]string{"pod": manifest, "pod-created": ""})
	mkPod(t, data, "exited-garbage", uuidB, map[string]string{"pod": manifest, "pod-created": ""})
	mkPod(t, data, "garbage", "22222222-2222-4333-8444-555555555555", nil)
	mkPod(t, data, "run", "not-a-uuid", nil)
	if u, err := Resolve(data, "11111111-2"); err != nil || u != uuidA {
		t.Errorf("unique prefix: %q %v", u, err)
	}
	if _, err := Resolve(data, "11111111"); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if _, err := Resolve(data, "2222"); !errors.Is(err, ErrNotFound) {
		t.Errorf("garbage/ is not searched: %v", err)
	}
	if u, err := Resolve(data, "11111111-9999-4333-8444-555555555555"); err != nil || u != uuidB {
		t.Errorf("full UUID: %q %v", u, err)
	}
	list, errs := List(data, IncludeMost, Full)
	if len(errs) != 0 || len(list) != 2 || list[0].UUID != uuidA || list[1].State != ExitedGarbage {
		t.Fatalf("list %v errs %v", list, errs)
	}
	if list[1].GCMarked.IsZero() || !list[0].GCMarked.IsZero() {
		t.Errorf("gc-marked times: %v %v", list[0].GCMarked, list[1].GCMarked)
	}
}

func TestWait(t *testing.T) {
	data := t.TempDir()
	dir := mkPod(t, data, "run", uuidA, map[string]string{"pod": manifest, "pod-created": ""})
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := WaitFinished(ctx, data, uuidA); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a running pod: %v", err)
	}
	if err := WaitReady(ctx, data, uuidA); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait-ready on a pod never ready: %v", err)
	}
	time.AfterFunc(30*time.Millisecond, func() { unix.Close(fd) })
	p, err := WaitFinished(context.Background(), data, uuidA)
	if err != nil || p.State != Exited {
		t.Fatalf("after unlock: %v %v", p, err)
	}
	if err := WaitReady(context.Background(), data, uuidA); !errors.Is(err, ErrNotReady) {
		t.Fatalf("wait-ready on an exited pod: %v", err)
	}
	if err := os.Symlink("ready", filepath.Join(dir, "stage1/rootfs/rkt/supervisor-status")); err == nil {
		t.Fatal("status dir should not exist yet")
	}
	if err := os.MkdirAll(filepath.Join(dir, "stage1/rootfs/rkt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ready", filepath.Join(dir, "stage1/rootfs/rkt/supervisor-status")); err != nil {
		t.Fatal(err)
	}
	if err := WaitReady(context.Background(), data, uuidA); err != nil {
		t.Fatalf("ready pod: %v", err)
	}
}

// isUUID accepts exactly the names appc prints a UUID as.
func TestIsUUID(t *testing.T) {
	for _, s := range []string{
		uuidA, "00000000-0000-0000-0000-000000000000", "abcdef01-2345-6789-abcd-ef0123456789",
		"ABCDEF01-2345-6789-abcd-ef0123456789", "abcdef0123456789abcdef0123456789",
		"abcdef01-2345-6789-abcd-ef012345678", "abcdef01-2345-6789-abcd-ef01234567890",
		"abcdef01-2345-6789-abcd_ef0123456789", "abcdef012-345-6789-abcd-ef0123456789",
		"abcdeg01-2345-6789-abcd-ef0123456789", "../../../../../../../../../../etc/x",
		"", "-", "abcdef01-2345-6789-abcd-ef012345678\x00",
	} {
		u, err := types.NewUUID(s)
		want := err == nil && u.String() == s
		if got := layout.IsUUID(s); got != want {
			t.Errorf("layout.IsUUID(%q) = %v, appc says %v", s, got, want)
		}
	}
}

// A Summary shows what a full read shows in the table's columns, and reads
// a pod's files as strictly: planted symlinks, FIFOs and oversized files
// are refused on its path too, and the buffer it reuses from pod to pod
// never leaks one pod's bytes into another's.
func TestSummary(t *testing.T) {
	data := t.TempDir()
	outside := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(outside, []byte(`{"name":"planted.org/x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	netInfo := `[{"netName":"default","ip":"172.16.28.2","extra":1}]`
	var uuids []string
	for i := 0; i < 24; i++ {
		u := fmt.Sprintf("%08x-2222-4333-8444-555555555555", i)
		uuids = append(uuids, u)
		// Names long and short, so that a short file is read into
		// a buffer a longer one left its bytes in.
		name := fmt.Sprintf("x.org/%s", strings.Repeat("n", 1+(i*37)%300))
		dir := mkPod(t, data, "run", u, map[string]string{
			"pod": manifest, "pod-created": "", "pid": "42\n", "net-info.json": netInfo,
			"appsinfo/a/manifest": `{"name":"` + name + `","labels":[{"name":"version","value":"1.0"}]}`,
		})
		switch i % 4 {
		case 1:
			// b's image manifest, net-info.json: planted symlinks.
			if err := os.MkdirAll(filepath.Join(dir, "appsinfo/b"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, "appsinfo/b/manifest")); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "net-info.json")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, "net-info.json")); err != nil {
				t.Fatal(err)
			}
		case 2:
			// A FIFO nobody writes: reading it would hang.
			if err := os.MkdirAll(filepath.Join(dir, "appsinfo/b"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(filepath.Join(dir, "appsinfo/b/manifest"), 0o644); err != nil {
				t.Fatal(err)
			}
		case 3:
			// A manifest over the bound (sparse: nothing is written).
			if err := os.Truncate(filepath.Join(dir, "pod"), layout.MaxFileSize+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	sum, errs := List(data, IncludeMost, Summary)
	full, errs2 := List(data, IncludeMost, Full)
	if len(errs) != 0 || len(errs2) != 0 || len(sum) != len(uuids) || len(full) != len(uuids) {
		t.Fatalf("summary %d pods %v, full %d pods %v", len(sum), errs, len(full), errs2)
	}
	for i, s := range sum {
		f := full[i]
		if s.UUID != uuids[i] || s.UUID != f.UUID || s.State != Exited || s.State != f.State ||
			!s.Created.Equal(f.Created) || s.Created.IsZero() || !s.Started.Equal(f.Started) || s.Started.IsZero() {
			t.Errorf("pod %d: summary %+v, full %+v", i, s, f)
		}
		if (s.ManifestErr == nil) != (f.ManifestErr == nil) || len(s.Apps) != len(f.Apps) || len(s.Networks) != len(f.Networks) {
			t.Errorf("pod %d: summary %v %+v %+v, full %v %+v %+v", i, s.ManifestErr, s.Apps, s.Networks, f.ManifestErr, f.Apps, f.Networks)
			continue
		}
		for j := range s.Apps {
			if s.Apps[j].Name != f.Apps[j].Name || s.Apps[j].ImageID != f.Apps[j].ImageID || s.Apps[j].ImageName != f.Apps[j].ImageName {
				t.Errorf("pod %d app %d: summary %+v, full %+v", i, j, s.Apps[j], f.Apps[j])
			}
		}
		for j := range s.Networks {
			if s.Networks[j].Name != f.Networks[j].Name || s.Networks[j].IP != f.Networks[j].IP || string(s.Networks[j].Raw) != string(f.Networks[j].Raw) {
				t.Errorf("pod %d network %d: summary %+v, full %+v", i, j, s.Networks[j], f.Networks[j])
			}
		}
		if s.Pid != 0 || s.Stage1TreeStoreID != "" || len(s.Apps) > 0 && s.Apps[0].Record != nil {
			t.Errorf("pod %d: summary read more than it shows: %+v", i, s)
		}
		name := fmt.Sprintf("x.org/%s:1.0", strings.Repeat("n", 1+(i*37)%300))
		switch i % 4 {
		case 0:
			if s.Apps[0].ImageName != name || s.Apps[1].ImageName != "" || len(s.Networks) != 1 || s.Networks[0].IP != "172.16.28.2" {
				t.Errorf("pod %d: %+v, networks %+v; want image %q", i, s.Apps, s.Networks, name)
			}
		case 1:
			if s.Apps[0].ImageName != name || s.Apps[1].ImageName != "" || len(s.Networks) != 0 {
				t.Errorf("pod %d: symlinks followed: %+v, networks %+v", i, s.Apps, s.Networks)
			}
		case 2:
			if s.Apps[0].ImageName != name || s.Apps[1].ImageName != "" {
				t.Errorf("pod %d: FIFO: %+v", i, s.Apps)
			}
		case 3:
			if s.ManifestErr == nil || !strings.Contains(s.ManifestErr.Error(), "larger than") || len(s.Apps) != 0 {
				t.Errorf("pod %d: oversized manifest: %v, apps %+v", i, s.ManifestErr, s.Apps)
			}
		}
	}
}

// Pods whose manifests are byte-identical are decoded once, and each still
// shows what decoding its own bytes shows: the apps up to a refused name,
// the same error, and image names from its own files.
func TestSummaryMemo(t *testing.T) {
	data := t.TempDir()
	bad := `{"apps":[{"name":"a","image":{"id":"sha512-a"}},{"name":"../x","image":{"id":"x"}},{"name":"b","image":{"id":"sha512-b"}}]}`
	for i := 0; i < 12; i++ {
		files := map[string]string{
			"pod": manifest, "pod-created": "",
			"appsinfo/a/manifest": fmt.Sprintf(`{"name":"x.org/a%d"}`, i%3),
		}
		if i%2 == 1 {
			files["pod"] = bad
		}
		if i%4 == 3 {
			files["appsinfo/a/manifest"] = `{"name":7}`
		}
		mkPod(t, data, "run", fmt.Sprintf("%08x-2222-4333-8444-555555555555", i), files)
	}
	sum, errs := List(data, IncludeMost, Summary)
	full, errs2 := List(data, IncludeMost, Full)
	if len(errs) != 0 || len(errs2) != 0 || len(sum) != 12 || len(full) != 12 {
		t.Fatalf("summary %d pods %v, full %d pods %v", len(sum), errs, len(full), errs2)
	}
	for i, s := range sum {
		want := fmt.Sprintf("x.org/a%d", i%3)
		if i%4 == 3 {
			want = ""
		}
		if len(s.Apps) == 0 || s.Apps[0].ImageName != want {
			t.Errorf("pod %d: apps %+v, want image %q", i, s.Apps, want)
		}
		if i%2 == 1 && (len(s.Apps) != 1 || !errors.Is(s.ManifestErr, errBadAppName)) {
			t.Errorf("pod %d: apps %+v, error %v; want app a and a refused name", i, s.Apps, s.ManifestErr)
		}
		if fmt.Sprint(s.ManifestErr) != fmt.Sprint(full[i].ManifestErr) || len(s.Apps) != len(full[i].Apps) {
			t.Errorf("pod %d: summary %v %+v, full %v %+v", i, s.ManifestErr, s.Apps, full[i].ManifestErr, full[i].Apps)
			continue
		}
		for j := range s.Apps {
			if s.Apps[j].Name != full[i].Apps[j].Name || s.Apps[j].ImageID != full[i].Apps[j].ImageID || s.Apps[j].ImageName != full[i].Apps[j].ImageName {
				t.Errorf("pod %d app %d: summary %+v, full %+v", i, j, s.Apps[j], full[i].Apps[j])
			}
		}
	}
}

// A pod caught in two directories mid-rename is listed once, from the
// earlier directory in its lifecycle.
func TestListTwice(t *testing.T) {
	data := t.TempDir()
	mkPod(t, data, "exited-garbage", uuidA, map[string]string{"pod": manifest, "pod-created": ""})
	mkPod(t, data, "run", uuidA, map[string]string{"pod": manifest, "pod-created": ""})
	mkPod(t, data, "prepared", uuidB, map[string]string{"pod": manifest, "pod-created": ""})
	mkPod(t, data, "exited-garbage", uuidB, map[string]string{"pod": manifest, "pod-created": ""})
	for _, detail := range []Detail{Full, Summary} {
		list, errs := List(data, IncludeMost, detail)
		if len(errs) != 0 || len(list) != 2 || list[0].UUID != uuidA || list[0].State != Exited ||
			list[1].UUID != uuidB || list[1].State != Prepared {
			t.Errorf("detail %d: %+v %v", detail, list, errs)
		}
	}
	if u, err := UUIDs(data, IncludeMost); err != nil || len(u) != 2 {
		t.Errorf("UUIDs: %v %v", u, err)
	}
}
