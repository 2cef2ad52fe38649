package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/capability"

	"github.com/pod1/pod1/layout"
)

// Isolators maps an app name to the isolators of its app section.
type Isolators map[string][]map[string]any

// isolator is one appc isolator.
func isolator(name string, value any) map[string]any {
	return map[string]any{"name": name, "value": value}
}

// withIsolators adds isolators (and readOnlyRootFS for the apps listed in
// ro) to a rendered pod manifest.
func withIsolators(t *testing.T, m []byte, isos Isolators, ro ...string) []byte {
	t.Helper()
	var pm map[string]any
	must(t, json.Unmarshal(m, &pm))
	for _, a := range pm["apps"].([]any) {
		ra := a.(map[string]any)
		name := ra["name"].(string)
		if list, ok := isos[name]; ok {
			ra["app"].(map[string]any)["isolators"] = list
		}
		for _, r := range ro {
			if r == name {
				ra["readOnlyRootFS"] = true
			}
		}
	}
	b, err := json.Marshal(pm)
	must(t, err)
	return b
}

// isoPod lays out a pod whose apps carry isolators.
func isoPod(t *testing.T, apps []App, isos Isolators, vols []map[string]any, ro ...string) *Pod {
	t.Helper()
	return newPodRaw(t, withIsolators(t, manifest(apps, vols), isos, ro...), apps)
}

// isoPodNamed is isoPod with the console's default "<app>[<pid>]: "
// prefix, for tests that tell the apps' lines apart: two apps' lines reach
// the console through two pipes, so their order there is not the order in
// which they were written.
func isoPodNamed(t *testing.T, apps []App, isos Isolators, vols []map[string]any) *Pod {
	t.Helper()
	m := manifestAnn(apps, vols, map[string]string{consoleFormatAnn: ""})
	return newPodRaw(t, withIsolators(t, m, isos), apps)
}

// appLines returns, by app, the console lines of a pod of isoPodNamed that
// start with prefix, without the app's "<app>[<pid>]: ".
func appLines(r *Run, prefix string) map[string][]string {
	line := regexp.MustCompile(`^([a-z0-9-]+)\[\d+\]: (.*)$`)
	out := map[string][]string{}
	for _, l := range strings.Split(r.Stdout.String(), "\n") {
		if f := line.FindStringSubmatch(l); f != nil && strings.HasPrefix(f[2], prefix) {
			out[f[1]] = append(out[f[1]], f[2])
		}
	}
	return out
}

// capMask renders a capability set as /proc/self/status does.
func capMask(t *testing.T, names ...string) string {
	t.Helper()
	var m uint64
	for _, n := range names {
		found := false
		for _, c := range capability.ListKnown() {
			if "CAP_"+strings.ToUpper(c.String()) == n {
				m |= 1 << uint(c)
				found = true
			}
		}
		if !found {
			t.Fatalf("unknown capability %s", n)
		}
	}
	return fmt.Sprintf("%016x", m)
}

// capsAnd is the capabilities two masks (as /proc/PID/status shows them)
// share.
func capsAnd(t *testing.T, a, b string) string {
	t.Helper()
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("capability masks %q, %q", a, b)
	}
	return fmt.Sprintf("%016x", x&y)
}

// ownBoundingSet is the test's own bounding set: what the stage1 it
// starts has, and so what an unrestricted app keeps.
func ownBoundingSet(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return ""
}

// rktDefaultCaps is rkt's default set (contract §5).
var rktDefaultCaps = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_KILL", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_NET_BIND_SERVICE", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETFCAP", "CAP_SYS_CHROOT",
}

// procStatus collects the probe's "status" lines (Cap*, NoNewPrivs,
// Seccomp, Sig*) of one app's output, by key.
func procStatus(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range linesWith(out, "status ") {
		k, v, _ := strings.Cut(l, ": ")
		m[k] = v
	}
	if len(m) == 0 {
		t.Fatalf("no status lines in %q", out)
	}
	return m
}

// stage1Hashes hashes every file of the pod's stage1 rootfs except the
// status, state and journal the stage1 writes, following symlinks (the
// entry points are links to the stage1 binary): what rkt gc will run as
// host root. The pod's journal, which PID 1 writes on a host systemd
// booted, is PID 1's output, not a file of the stage1's.
func stage1Hashes(t *testing.T, p *Pod) map[string]string {
	t.Helper()
	root := filepath.Join(p.Dir, layout.Stage1RootFS)
	out := map[string]string{}
	err := filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "rkt" || rel == "opt" || rel == layout.PodJournalDirIn {
			return filepath.SkipDir
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if fi, err = os.Stat(path); err != nil {
				return err
			}
		}
		// Sockets and the like are the running stage1's, not its files.
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		out[rel] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	must(t, err)
	if len(out) == 0 {
		t.Fatal("no stage1 files hashed")
	}
	return out
}

// treeDigest lists every entry under dir with its mode and content, so a
// host canary can be compared byte for byte.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		l := fmt.Sprintf("%s %v", rel, fi.Mode())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			l += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		lines = append(lines, l)
		return nil
	})
	must(t, err)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
