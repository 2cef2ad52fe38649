package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pod1/pod1/layout"
)

// A symlink or a file planted in the pod directory where run creates or
// opens a directory is refused with one line naming it, before anything
// is made: run, as host root, once followed a stage1/rootfs/rkt/pod1
// symlink and made apps/ where it pointed.
func TestPlantedPodTreeIsRefused(t *testing.T) {
	cases := []struct {
		name, path string
		symlink    bool
		before     func(t *testing.T, p *Pod)
	}{
		{name: "pod1-symlink", path: layout.Pod1Dir, symlink: true},
		{name: "pod1-file", path: layout.Pod1Dir},
		{name: "apps-symlink", path: layout.AppSpecDir, symlink: true, before: func(t *testing.T, p *Pod) {
			must(t, os.Mkdir(filepath.Join(p.Dir, layout.Pod1Dir), 0o700))
		}},
		{name: "logs-symlink", path: layout.LogDir, symlink: true},
		{name: "shared-volumes-symlink", path: layout.SharedVolumes, symlink: true},
		{name: "attach-symlink", path: layout.AttachDir, symlink: true},
		{name: "rkt-symlink", path: layout.RktDir, symlink: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPod(t, []App{okApp("a")}, nil)
			if c.before != nil {
				c.before(t, p)
			}
			planted := filepath.Join(p.Dir, c.path)
			target := t.TempDir()
			if c.symlink {
				if fi, err := os.Lstat(planted); err == nil && fi.IsDir() {
					// A directory of the tree: moved where the
					// symlink leads, so that it is all there.
					must(t, os.Remove(target))
					must(t, os.Rename(planted, target))
				}
				must(t, os.Symlink(target, planted))
			} else {
				must(t, os.WriteFile(planted, nil, 0o644))
			}
			before, _ := os.ReadDir(target)
			r := runPod(t, p, RunOpts{})
			if r.Code != 254 {
				t.Fatalf("exit %d, want 254; stderr %q", r.Code, r.Stderr)
			}
			msg := strings.TrimSuffix(r.Stderr.String(), "\n")
			if strings.Contains(msg, "\n") || !strings.Contains(msg, c.path) {
				t.Errorf("want one line naming %s, got %q", c.path, r.Stderr)
			}
			if r.Stdout.Len() != 0 {
				t.Errorf("an app ran: %q", r.Stdout)
			}
			after, _ := os.ReadDir(target)
			if len(after) != len(before) {
				t.Errorf("run made %v in the symlink's target (had %v)", after, before)
			}
			for _, f := range []string{layout.Pid, layout.HostsFile} {
				if _, err := os.Lstat(filepath.Join(p.Dir, f)); err == nil {
					t.Errorf("%s was created", f)
				}
			}
		})
	}
}
