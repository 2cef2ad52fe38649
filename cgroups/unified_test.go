package cgroups

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeUnified lays out, in the host's real cgroup2 tree, a subtree shaped
// like systemd's (user.slice/user-0.slice/session-1.scope) with a process
// in the scope, and returns its top, which stands for the hierarchy's
// root. The only controller this hybrid machine leaves to cgroup2 is
// hugetlb (every other is bound to a v1 hierarchy): it is what shows the
// kernel's rules here.
func fakeUnified(t *testing.T) (top string, scopeProc *exec.Cmd) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: it makes cgroups in the host's cgroup2 tree and moves a process into one")
	}
	v2, _, err := mounts()
	if err != nil || v2 == "" {
		t.Skip("no cgroup2 mount")
	}
	if b, _ := os.ReadFile(filepath.Join(v2, "cgroup.controllers")); !containsField(string(b), "hugetlb") {
		t.Skip("cgroup2 offers no free controller to test with")
	}
	// The real root may pass hugetlb on (it is exempt from the
	// no-internal-process rule); nothing else uses it there. It is
	// taken back at the end (this cleanup runs after the one removing
	// the subtree): left on, it is a host change that outlives the
	// test, and a hybrid layout with a controller on cgroup2 is one
	// crun refuses and on which hugetlb cannot be bound to v1.
	if b, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control")); !containsField(string(b), "hugetlb") {
		t.Cleanup(func() {
			if err := os.WriteFile(filepath.Join(v2, "cgroup.subtree_control"), []byte("-hugetlb"), 0); err != nil {
				t.Errorf("disable hugetlb again in %s: %v", v2, err)
			}
		})
	}
	must(t, enable(v2, "hugetlb"))
	top = filepath.Join(v2, "pod1-test-unified-"+strconv.Itoa(os.Getpid()))
	scope := filepath.Join(top, "user.slice", "user-0.slice", "session-1.scope")
	must(t, os.MkdirAll(scope, 0o755))
	t.Cleanup(func() {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
	})
	cg, err := os.Open(scope)
	must(t, err)
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	scopeProc = exec.CommandContext(ctx, "sleep", "60")
	scopeProc.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	must(t, scopeProc.Start())
	t.Cleanup(func() { _ = scopeProc.Process.Kill(); _ = scopeProc.Wait() })
	return top, scopeProc
}

// The fake hierarchy leaves the real root's subtree_control as it found
// it: the controller it enabled there for the test is disabled again.
// It runs first, while no other test of the package has touched the root.
func TestFakeUnifiedLeavesTheRootAsFound(t *testing.T) {
	v2, _, err := mounts()
	if err != nil || v2 == "" {
		t.Skip("no cgroup2 mount")
	}
	before, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control"))
	t.Run("fake", func(t *testing.T) { fakeUnified(t) })
	after, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control"))
	if string(after) != string(before) {
		t.Fatalf("%s/cgroup.subtree_control was %q before the test, %q after", v2, before, after)
	}
}

// On a systemd-like unified tree the caller's scope holds processes, so the
// kernel refuses to enable a controller for its children (what the old
// code did, ignoring the error); the pod's cgroup goes into the slice
// above instead, with the controller enabled from the top down, and its
// children get it.
func TestUnifiedPodInSessionScope(t *testing.T) {
	top, _ := fakeUnified(t)
	scope := filepath.Join(top, "user.slice", "user-0.slice", "session-1.scope")
	// What the old code relied on, even with the controller given to the
	// scope: refused while the scope holds a process.
	if why := enableDown(top, filepath.Dir(scope), []string{"hugetlb"}); why["hugetlb"] != nil {
		t.Fatal(why["hugetlb"])
	}
	err := os.WriteFile(filepath.Join(scope, "cgroup.subtree_control"), []byte("+hugetlb"), 0)
	if !errors.Is(err, unix.EBUSY) {
		t.Fatalf("enabling a controller in a scope with a process: %v, want EBUSY", err)
	}
	parent := podParentIn(top, "/user.slice/user-0.slice/session-1.scope")
	if want := filepath.Join(top, "user.slice", "user-0.slice"); parent != want {
		t.Fatalf("pod parent %s, want %s", parent, want)
	}
	g, err := newUnifiedPod(top, parent, "pod1-x", []string{"hugetlb"})
	must(t, err)
	app, err := g.Child("app-a")
	must(t, err)
	if b, _ := os.ReadFile(filepath.Join(app.V2, "cgroup.controllers")); !containsField(string(b), "hugetlb") {
		t.Fatalf("app cgroup controllers %q, want hugetlb", b)
	}
	// Controllers the host does not offer, when needed, are an error
	// naming the controller; when not needed, nothing.
	if _, err := newUnifiedPod(top, parent, "pod1-y", []string{"hugetlb", "memory"}); err == nil ||
		!strings.Contains(err.Error(), "cgroup controller memory") {
		t.Fatalf("missing controller: %v", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "pod1-y")); err == nil {
		t.Fatal("a pod whose controllers could not be had left its cgroup")
	}
}

// The caller in the root: the pod goes right below it. A slice that holds
// a process stops the walk above it, so the controllers are never asked of
// a cgroup that cannot give them.
func TestUnifiedPodParentRules(t *testing.T) {
	top, _ := fakeUnified(t)
	if p := podParentIn(top, "/"); p != top {
		t.Fatalf("caller in the root: parent %s", p)
	}
	if p := podParentIn(top, "/user.slice"); p != top {
		t.Fatalf("caller in a child of the root: parent %s", p)
	}
	slice := filepath.Join(top, "user.slice")
	cg, err := os.Open(slice)
	must(t, err)
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if p := podParentIn(top, "/user.slice/user-0.slice/session-1.scope"); p != top {
		t.Fatalf("with a process in user.slice: parent %s, want the top", p)
	}
	// enableDown says why a cgroup with processes cannot pass a
	// controller on.
	why := enableDown(top, filepath.Join(top, "user.slice", "user-0.slice"), []string{"hugetlb"})
	if why["hugetlb"] == nil || !strings.Contains(why["hugetlb"].Error(), "no-internal-process") {
		t.Fatalf("enable through a cgroup with a process: %v", why["hugetlb"])
	}
}

// A caller in a cgroup of its own below a scope that holds another
// process (a user's shell, and rkt put in a child cgroup of its session's
// scope): the pod's cgroup goes into the slice above the scope, and the
// caller's processes stay where they are. Moved into a leaf of their own
// cgroup, they left a cgroup no controller could reach through the
// scope, and the pod never started (TestWaiterPrimingMovesNothing in
// `make vm-test LAYOUT=v2`).
func TestUnifiedPodBelowAScopeWithAProcess(t *testing.T) {
	top, _ := fakeUnified(t)
	scope := filepath.Join(top, "user.slice", "user-0.slice", "session-1.scope")
	caller := filepath.Join(scope, "caller")
	must(t, os.Mkdir(caller, 0o755))
	start := func(dir string) *exec.Cmd {
		cg, err := os.Open(dir)
		must(t, err)
		defer cg.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		cmd := exec.CommandContext(ctx, "sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
		must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	start(scope)
	ours := start(caller)
	rel := strings.TrimPrefix(caller, filepath.Dir(top))
	mount := filepath.Dir(top)
	if p := podParent(mount, rel, ours.Process.Pid); p != filepath.Join(top, "user.slice", "user-0.slice") {
		t.Fatalf("pod parent %s, want the slice above the scope", p)
	}
	if _, err := os.Stat(filepath.Join(caller, OwnLeaf)); err == nil {
		t.Fatalf("the caller's processes were moved into %s", OwnLeaf)
	}
	// With the scope empty, the caller's own cgroup is the pod's
	// parent, its processes moved into the leaf (a systemd unit).
	unit := filepath.Join(top, "system.slice", "x.service")
	must(t, os.MkdirAll(unit, 0o755))
	ours = start(unit)
	// Unless the caller's parent died: init is every process's
	// ancestor, and a unit holding others (a test suite's service) is
	// then not the pod's (the systemd VM, where an orphaned run put
	// the suite's own processes into the leaf).
	if p := podParent(mount, strings.TrimPrefix(unit, mount), 1); p == unit {
		t.Fatal("with init as the ancestor, the unit's own cgroup is the pod parent")
	}
	if _, err := os.Stat(filepath.Join(unit, OwnLeaf)); err == nil {
		t.Fatalf("with init as the ancestor, the unit's processes were moved into %s", OwnLeaf)
	}
	if p := podParent(mount, strings.TrimPrefix(unit, mount), ours.Process.Pid); p != unit {
		t.Fatalf("pod parent %s, want the unit's own cgroup", p)
	}
	if b, _ := os.ReadFile(filepath.Join(unit, OwnLeaf, "cgroup.procs")); strings.TrimSpace(string(b)) != strconv.Itoa(ours.Process.Pid) {
		t.Fatalf("%s holds %q, want the unit's process", OwnLeaf, b)
	}
}

// descends follows parent links: the test process descends from its
// parent, not the other way round, and init descends from nobody else.
func TestDescends(t *testing.T) {
	if !descends(os.Getpid(), os.Getppid()) || !descends(os.Getpid(), os.Getpid()) {
		t.Error("the test process does not descend from its parent or itself")
	}
	if descends(os.Getppid(), os.Getpid()) || descends(1, os.Getpid()) {
		t.Error("a parent descends from its child")
	}
}
