package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/procstat"
)

// Controllers of a unified hierarchy the pod's cgroup is given, when the
// host offers them: pids for the pod's and the apps' pids.max, memory and
// cpu for the resource isolators.
var unifiedControllers = []string{"pids", "memory", "cpu"}

// podParentIn picks the cgroup of a unified hierarchy mounted at mount
// that the pod's cgroup is made in, for a caller in the cgroup self
// (relative to mount). cgroup v2 enables a controller for the children of
// a cgroup only if that cgroup holds no process (the root excepted), and
// the caller's own cgroup always holds the caller: a session scope holds
// the user's shell too, a service its main process. So the pod's cgroup
// is made in the deepest cgroup on the way from the root to the caller's
// in which no process lives, itself included, with every cgroup above it
// process-free as well (under systemd: the slice the caller's scope or
// service is in; the root when the caller is in it). That way the
// controllers can be enabled from the root down, and no process but the
// pod's is moved.
func podParentIn(mount, self string) string {
	parent := mount
	rel := strings.Trim(filepath.Clean("/"+self), "/")
	if rel == "" {
		return parent
	}
	parts := strings.Split(rel, "/")
	// The last part is the caller's own cgroup: never a candidate.
	for _, p := range parts[:len(parts)-1] {
		d := filepath.Join(parent, p)
		if hasProcesses(d) {
			break
		}
		parent = d
	}
	return parent
}

// hasProcesses reports whether a cgroup v2 directory holds any process
// (an unreadable one counts as holding some: it cannot be used).
func hasProcesses(dir string) bool {
	b, err := readFile(filepath.Join(dir, "cgroup.procs"))
	return err != nil || len(strings.TrimSpace(string(b))) > 0
}

// enableDown enables each of ctrls for the children of every cgroup from
// mount down to dir (both included), one controller per write: a write
// naming several fails as a whole if one of them is refused. It returns,
// for each controller that could not be had, why.
func enableDown(mount, dir string, ctrls []string) (why map[string]error) {
	why = map[string]error{}
	rel, err := filepath.Rel(mount, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		for _, c := range ctrls {
			why[c] = fmt.Errorf("%s is not under %s", dir, mount)
		}
		return why
	}
	chain := []string{mount}
	if rel != "." {
		d := mount
		for _, p := range strings.Split(rel, "/") {
			d = filepath.Join(d, p)
			chain = append(chain, d)
		}
	}
	for _, c := range ctrls {
		for _, d := range chain {
			if err := enable(d, c); err != nil {
				why[c] = err
				break
			}
		}
	}
	return why
}

// enable makes ctrl available to dir's children, if it is not already.
func enable(dir, ctrl string) error {
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); err == nil && containsField(string(b), ctrl) {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(dir, "cgroup.controllers"), err)
	}
	if !containsField(string(b), ctrl) {
		return fmt.Errorf("%s does not offer it (cgroup.controllers: %q)", dir, strings.TrimSpace(string(b)))
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+ctrl), 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("%s holds processes, so it cannot pass it on (cgroup v2's no-internal-process rule): %w", dir, err)
		}
		return fmt.Errorf("enable it in %s: %w", dir, err)
	}
	return nil
}

// NewPod creates the pod's cgroup, named name. On a hybrid or legacy layout
// it is a child of the caller's cgroup in every hierarchy. On a unified
// one it is made in the cgroup podParentIn picks, with the controllers
// enabled from the root down and in the pod's cgroup for its children;
// need lists the controllers the pod cannot run without, and one that
// cannot be had is an error naming it and why.
//
// ancestor is the pid of the process rkt exec'd (the waiter): when every
// process of the caller's own cgroup is it or a descendant of it, as in a
// systemd unit that runs `rkt run` (systemd-run, a .service), the pod is
// made in that very cgroup, as rkt's stage1 kept its pod in the unit
// (nspawn --keep-unit): those processes move into a leaf of it (OwnLeaf)
// first, so that it holds none and may pass controllers on. The unit's
// limits then cover the pod, systemd stops the pod with the unit, and the
// journal files the pod's lines under the unit. 0 never moves anything.
func NewPod(name string, need []string, ancestor int) (*Group, error) {
	self, err := Current()
	if err != nil {
		return nil, err
	}
	if !self.Unified {
		return self.NewChild(name)
	}
	mount, rel, err := unifiedMount()
	if err != nil {
		return nil, err
	}
	return newUnifiedPod(mount, podParent(mount, rel, ancestor), name, need)
}

// podParent is NewPod's choice of the cgroup the pod's is made in, for a
// caller in the cgroup rel of the unified hierarchy at mount: the caller's
// own (its processes moved into OwnLeaf) when every one of them is
// ancestor's and every cgroup above it holds none, else podParentIn's.
// A cgroup above with a process (a login session's scope, where a caller
// put rkt in a child cgroup) could pass no controller down to the
// caller's, whatever was moved.
func podParent(mount, rel string, ancestor int) string {
	parent := podParentIn(mount, rel)
	own := filepath.Join(mount, rel)
	if ancestor > 0 && own != parent && filepath.Dir(own) == parent && moveOwnToLeaf(own, ancestor) {
		return own
	}
	return parent
}

// OwnLeaf is the cgroup, in the caller's own cgroup, that its processes
// move into when the pod is made beside it (NewPod): the waiter, run and
// the lock keeper, which systemd still counts as the unit's.
const OwnLeaf = "pod1-run"

// moveOwnToLeaf moves every process of the cgroup dir into dir/OwnLeaf if
// each is ancestor or a descendant of it, and reports whether dir holds
// none after. A process forked meanwhile is moved at the next pass; one
// not ours leaves dir as it is (a login session's scope: the user's shell).
func moveOwnToLeaf(dir string, ancestor int) bool {
	return moveToLeaf(dir, OwnLeaf, ancestor)
}

// moveToLeaf moves every process of the cgroup dir into dir/leaf if each
// is ancestor or a descendant of it, and reports whether dir holds none
// after. Every process descends from init: an ancestor of 1 (a caller
// whose parent died, orphaned to init) claims nothing.
func moveToLeaf(dir, leaf string, ancestor int) bool {
	if ancestor <= 1 {
		return false
	}
	for pass := 0; pass < 5; pass++ {
		pids, err := (&Group{V2: dir}).Procs()
		if err != nil {
			return false
		}
		if len(pids) == 0 {
			return true
		}
		for _, pid := range pids {
			if !descends(pid, ancestor) {
				return false
			}
		}
		to := filepath.Join(dir, leaf)
		if err := os.Mkdir(to, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return false
		}
		for _, pid := range pids {
			// A process gone meanwhile (ESRCH) is no longer there.
			if err := (&Group{V2: to}).Add(pid); err != nil && !errors.Is(err, unix.ESRCH) {
				return false
			}
		}
	}
	return false
}

// descends reports whether pid is ancestor or one of its descendants,
// from the parent links in /proc (a process gone counts as not).
func descends(pid, ancestor int) bool {
	for depth := 0; depth < 64 && pid > 1; depth++ {
		if pid == ancestor {
			return true
		}
		st, ok := procstat.Read(pid)
		if !ok {
			return false
		}
		if pid, ok = st.PPid(); !ok {
			return false
		}
	}
	return pid == ancestor
}

// newUnifiedPod makes parent/name, enables the controllers in it and
// everything above, and checks that need are among them.
func newUnifiedPod(mount, parent, name string, need []string) (*Group, error) {
	ctrls := unifiedControllers
	for _, c := range need {
		if !containsField(strings.Join(ctrls, " "), c) {
			ctrls = append(ctrls[:len(ctrls):len(ctrls)], c)
		}
	}
	why := enableDown(mount, parent, ctrls)
	for _, c := range need {
		if why[c] != nil {
			return nil, fmt.Errorf("cgroup controller %s: %w", c, why[c])
		}
	}
	g := &Group{V2: filepath.Join(parent, name), V1: map[string]string{}, Unified: true}
	if err := os.Mkdir(g.V2, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup %s: %w", g.V2, os.ErrExist)
		}
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	// The pod's cgroup holds no process itself (PID 1 and the apps are
	// in its children), so it can pass on whatever its parent gave it.
	for _, c := range ctrls {
		if why[c] != nil {
			continue
		}
		if err := enable(g.V2, c); err != nil && containsField(strings.Join(need, " "), c) {
			_ = os.Remove(g.V2)
			return nil, fmt.Errorf("cgroup controller %s: %w", c, err)
		}
	}
	return g, nil
}

// unifiedMount returns the unified hierarchy's mount point and the
// caller's cgroup in it.
func unifiedMount() (mount, rel string, err error) {
	v2m, _, err := mounts()
	if err != nil {
		return "", "", fmt.Errorf("cgroup mounts: %w", err)
	}
	v2p, _, err := selfPaths()
	if err != nil {
		return "", "", fmt.Errorf("own cgroup: %w", err)
	}
	if v2m == "" {
		return "", "", errors.New("no cgroup2 hierarchy is mounted")
	}
	return v2m, v2p, nil
}

// AppsName is the pod's cgroup's child that holds every app's: the pod's
// pids.max is set on it, so that it counts the apps' tasks but not PID 1's.
const AppsName = "apps"

// PassOn makes the controllers g has available to its children on a
// unified hierarchy (g must hold no process); need are those that must be.
func (g *Group) PassOn(need []string) error {
	if !g.Unified || g.V2 == "" {
		return nil
	}
	for _, c := range unifiedControllers {
		if err := enable(g.V2, c); err != nil && containsField(strings.Join(need, " "), c) {
			return fmt.Errorf("cgroup controller %s: %w", c, err)
		}
	}
	return nil
}
