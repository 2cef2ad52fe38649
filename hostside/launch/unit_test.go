package launch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/appc/spec/schema/types"
	"github.com/pod1/pod1/logx"
	"golang.org/x/sys/unix"
)

func TestNewUUID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		u, err := NewUUID()
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(u) {
			t.Fatalf("%q is not a lower-case v4 UUID", u)
		}
		if _, err := types.NewUUID(u); err != nil {
			t.Fatalf("appc rejects %q: %v", u, err)
		}
		if seen[u] {
			t.Fatalf("duplicate UUID %q", u)
		}
		seen[u] = true
	}
}

func TestAppName(t *testing.T) {
	for in, want := range map[string]string{
		"example.com/hello":        "hello",
		"example.com/My_App":       "my-app",
		"coreos.com/etcd":          "etcd",
		"hello":                    "hello",
		"example.com/a/b/Web.Srv2": "web-srv2",
		"example.com/-x-":          "x",
	} {
		got, err := AppName(in)
		if err != nil || string(got) != want {
			t.Errorf("AppName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := AppName("example.com/___"); err == nil {
		t.Error("AppName accepted a name with no valid character")
	}
}

func TestCheckNames(t *testing.T) {
	ok := []types.ACName{"a", "b", "web"}
	if err := checkNames(ok); err != nil {
		t.Errorf("checkNames(%v): %v", ok, err)
	}
	if err := checkNames([]types.ACName{"a", "b", "a"}); !errors.Is(err, ErrDuplicateApp) {
		t.Errorf("duplicate: %v", err)
	}
	if err := checkNames([]types.ACName{"web-created", "web"}); !errors.Is(err, ErrNameCollision) {
		t.Errorf("marker collision: %v", err)
	}
}

func TestStage1Argv(t *testing.T) {
	const ep = "/d/pods/run/u/stage1/rootfs/run"
	base := Options{Net: "default", LocalConfig: "/etc/rkt"}
	cases := []struct {
		name    string
		mod     func(*Options)
		version int
		want    []string
		warn    bool
	}{
		{"defaults", func(*Options) {}, 5,
			[]string{ep, "--net=default", "--local-config=/etc/rkt", "u"}, false},
		{"all", func(o *Options) {
			o.Debug, o.Interactive, o.Hostname, o.Net = true, true, "myhost", "host"
		}, 6, []string{ep, "--debug", "--net=host", "--interactive", "--local-config=/etc/rkt", "--hostname=myhost", "u"}, false},
		{"net-list", func(o *Options) { o.Net = "none,foo" }, 5,
			[]string{ep, "--net=none,foo", "--local-config=/etc/rkt", "u"}, false},
		{"hostname-v1-dropped", func(o *Options) { o.Hostname = "h" }, 1,
			[]string{ep, "--net=default", "--local-config=/etc/rkt", "u"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			var warn bytes.Buffer
			logx.SetOutput(&warn)
			defer logx.SetOutput(os.Stderr)
			tc.mod(&o)
			got := stage1Argv(ep, o, tc.version, "u")
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("argv\n got %q\nwant %q", got, tc.want)
			}
			if (warn.Len() > 0) != tc.warn {
				t.Errorf("warning output %q, want warning=%v", warn.String(), tc.warn)
			}
		})
	}
}

func TestStage1Env(t *testing.T) {
	in := []string{"PATH=/bin", "RKT_LOCK_FD=99", "HOME=/root", "RKT_SELINUX_CONTEXT=x"}
	got := stage1Env(in, 6)
	want := []string{"PATH=/bin", "HOME=/root", "RKT_LOCK_FD=6", "RKT_SELINUX_CONTEXT=", "RKT_SELINUX_MOUNT_CONTEXT="}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env\n got %q\nwant %q", got, want)
	}
}

// Mount points come back as the kernel names them, unescaped (mountinfo
// writes a space as \040), and only those at or below the directory.
func TestMountsUnderUnescapes(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	dir := filepath.Join(base, "a b")
	sibling := filepath.Join(base, "a bc")
	for _, d := range []string{dir, sibling} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(d, unix.MNT_DETACH) })
	}
	got, err := MountsUnder(dir)
	if err != nil || len(got) != 1 || got[0] != dir {
		t.Fatalf("MountsUnder(%q) = %q, %v", dir, got, err)
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want error
	}{
		{Options{Apps: []AppOptions{{Image: "x"}}}, ErrNoStage1},
		{Options{Stage1: "s"}, ErrNoApps},
		{Options{Stage1: "s", Interactive: true, Apps: []AppOptions{{Image: "a"}, {Image: "b"}}}, ErrInteractiveApps},
	} {
		if _, err := Prepare(tc.o); !errors.Is(err, tc.want) {
			t.Errorf("Prepare(%+v) = %v, want %v", tc.o, err, tc.want)
		}
	}
	if _, err := Prepare(Options{Dir: t.TempDir(), Stage1: "/nonexistent", Apps: []AppOptions{{Image: "x"}}}); err == nil || !strings.Contains(err.Error(), "stage1") {
		t.Errorf("missing stage1 image: %v", err)
	}
}
