package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/layout"
)

// measureHostTools is issue §5: `pod1 list` and `pod1 gc` over n exited
// pods. One real pod is run with `pod1 run --no-overlay` (so nothing stays
// mounted), and its directory is cloned n-1 times under new UUIDs with
// hard links: n exited pods exactly as pod1 leaves them, made in a second.
func (b *bench) measureHostTools(n int) []*section {
	s := newSection("host", fmt.Sprintf("Host tools over %d exited pods", n), "ms")
	s.noRatio = true
	s.desc = fmt.Sprintf("`pod1 --dir=D list` (the table) over %d exited pods in D/pods/run, and `pod1 --dir=D gc "+
		"--grace-period=0s`, which marks all of them exited-garbage, runs each pod's stage1 gc entry point, and "+
		"removes them. The pods are one real pod run by `pod1 run --no-overlay` and cloned by hard links under new "+
		"UUIDs; gc gets a fresh set each round (untimed). The floor of gc is `rm -rf` of the same pods, cloned the same way, "+
		"interleaved with gc round by round: what removing the files costs, without gc's checks, stage1 gc "+
		"entry points and syncs; gc works on a few pods at a time and rm on one, so gc can go below it.", n)
	list := s.row("pod1 list", true)
	gc := s.row("pod1 gc --grace-period=0s", true)
	rm := s.row(gcFloorRow, false)
	for _, c := range []struct {
		r   *row
		cmd string
	}{{list, "list"}, {gc, "gc"}} {
		if err := b.pod1Has(c.cmd); err != nil {
			c.r.note = "not available: " + err.Error()
		}
	}
	if list.note != "" && gc.note != "" {
		return []*section{s}
	}
	dir := filepath.Join(b.work, "hosttools")
	defer func() { _ = os.RemoveAll(dir) }()
	tmpl, err := b.exitedPod(dir)
	if err != nil {
		list.note, gc.note = "setup failed: "+err.Error(), "setup failed: "+err.Error()
		return []*section{s}
	}
	runCmd := func(r *row, args ...string) error {
		argv := append([]string{b.pod1Bin, "--dir=" + dir}, args...)
		c, err := run(spec{argv: argv}, 120*time.Second)
		if c != nil {
			defer c.close()
		}
		if err != nil {
			return err
		}
		r.m[0].add(ms(c.elapsed()))
		if args[0] == "list" {
			if got := strings.Count(c.output(1<<24), "\n"); got < n {
				return fmt.Errorf("list printed %d lines for %d pods", got, n)
			}
		}
		return nil
	}
	if list.note == "" {
		if err := clonePods(dir, tmpl, n); err != nil {
			list.note = "setup failed: " + err.Error()
		} else {
			for i := -b.warmup; i < b.rounds; i++ {
				if err := list.record(i < 0, func(r *row) error { return runCmd(r, "list") }); err != nil {
					b.logf("host: list: %v", err)
				}
			}
		}
	}
	if gc.note == "" {
		for i := 0; i < 3; i++ {
			if err := clonePods(dir, tmpl, n); err != nil {
				rm.fail(err)
			} else if err := rm.record(false, func(r *row) error {
				c, err := run(spec{argv: []string{lookPath("rm"), "-rf", "--", filepath.Join(dir, layout.StateDir(layout.PodsRun))}}, 120*time.Second)
				if c != nil {
					defer c.close()
				}
				if err != nil {
					return err
				}
				r.m[0].add(ms(c.elapsed()))
				return os.MkdirAll(filepath.Join(dir, layout.StateDir(layout.PodsRun)), 0o755)
			}); err != nil {
				b.logf("host: rm -rf: %v", err)
			}
			if err := clonePods(dir, tmpl, n); err != nil {
				gc.fail(err)
				continue
			}
			err := gc.record(false, func(r *row) error {
				if err := runCmd(r, "gc", "--grace-period=0s"); err != nil {
					return err
				}
				k := 0
				for _, d := range []string{layout.PodsRun, layout.PodsExitedGarbage, layout.PodsGarbage} {
					left, _ := os.ReadDir(filepath.Join(dir, layout.StateDir(d)))
					k += len(left)
				}
				if k > 0 {
					return fmt.Errorf("gc left %d pods", k)
				}
				return nil
			})
			if err != nil {
				b.logf("host: gc: %v", err)
			}
		}
	}
	fmt.Fprintln(os.Stderr)
	return []*section{s}
}

// gcFloorRow is the row of `rm -rf` of as many pods as gc removes.
const gcFloorRow = "floor of gc: rm -rf of the same pods"

// pod1Has says whether bin/pod1 has the command: its --help exits 0.
func (b *bench) pod1Has(cmd string) error {
	c, err := run(spec{argv: []string{b.pod1Bin, cmd, "--help"}}, 10*time.Second)
	if c != nil {
		defer c.close()
	}
	if err != nil {
		return fmt.Errorf("`pod1 %s` is not a command of bin/pod1 yet (%w)", cmd, err)
	}
	return nil
}

// exitedPod runs one real pod with the launcher and moves its directory
// aside as the template.
func (b *bench) exitedPod(dir string) (string, error) {
	aci, err := b.trueACI()
	if err != nil {
		return "", err
	}
	_, err = run(spec{argv: []string{b.pod1Bin, "--dir=" + dir, "--insecure-options=image", "run", "--no-overlay",
		"--stage1-path=" + filepath.Join(b.repo, "build/stage1.aci"), "--net=none", aci}}, 30*time.Second)
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(filepath.Join(dir, layout.StateDir(layout.PodsRun)))
	if err != nil || len(ents) != 1 {
		return "", errors.Join(err, fmt.Errorf("want one pod in run/, found %d", len(ents)))
	}
	// The pod left its cgroups for gc, which never sees the template:
	// they go now, as its gc entry point would remove them.
	pd := filepath.Join(dir, layout.PodIn(layout.PodsRun, ents[0].Name()))
	if err := cgroups.RemovePod(pd, ents[0].Name()); err != nil {
		return "", err
	}
	tmpl := filepath.Join(dir, "template")
	return tmpl, os.Rename(pd, tmpl)
}

// clonePods fills pods/run with n hard-linked copies of the template.
func clonePods(dir, tmpl string, n int) error {
	for i := 0; i < n; i++ {
		uuid, err := newUUID()
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, layout.PodIn(layout.PodsRun, uuid))
		if err := linkTree(tmpl, dst); err != nil {
			return err
		}
		if err := renameCgroups(tmpl, dst, uuid); err != nil {
			return err
		}
	}
	return nil
}

// uuidRE is a pod UUID as cgroups.json spells it: with dashes, or with
// systemd's escape of them in a unit name (machine-rkt\x2d<uuid>.scope),
// as JSON writes it (a doubled backslash).
var uuidRE = regexp.MustCompile(`[0-9a-f]{8}(?:-|\\\\x2d)[0-9a-f]{4}(?:-|\\\\x2d)[0-9a-f]{4}(?:-|\\\\x2d)[0-9a-f]{4}(?:-|\\\\x2d)[0-9a-f]{12}`)

// renameCgroups gives a cloned pod its own cgroups.json: gc refuses a
// cgroup path that does not carry the pod's own UUID (a planted file), so
// a hard link of the template's would fail every clone's stage1 gc.
func renameCgroups(tmpl, dst, uuid string) error {
	src := filepath.Join(tmpl, layout.CgroupsFile)
	b, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	target := filepath.Join(dst, layout.CgroupsFile)
	if err := os.Remove(target); err != nil {
		return err
	}
	escaped := strings.ReplaceAll(uuid, "-", `\\x2d`)
	out := uuidRE.ReplaceAllFunc(b, func(m []byte) []byte {
		if bytes.Contains(m, []byte(`\\x2d`)) {
			return []byte(escaped)
		}
		return []byte(uuid)
	})
	return os.WriteFile(target, out, 0o640)
}
