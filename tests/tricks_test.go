package tests

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/starttricks"
)

// Each start-latency trick can be turned off for a pod
// (starttricks.Env), and off it really is: these tests look, in real
// pods, at what each trick leaves in the processes (their descriptors,
// environment, threads, memory, system calls), with the trick on and
// with it off.

// trickPod is a pod of one sleeping app started with the tricks off named,
// once the Go run has handed over: the waiter's, PID 1's and the lock
// keeper's pids.
type trickPod struct {
	p                    *Pod
	r                    *Run
	ns                   string
	waiter, init, keeper int
}

func startTrickPod(t *testing.T, off string) *trickPod {
	t.Helper()
	p := newPod(t, []App{{Name: "a", Exec: probe("sleep", "1h")}}, nil)
	r := start(t, p, RunOpts{Env: []string{starttricks.Env + "=" + off}})
	tp := &trickPod{p: p, r: r, waiter: r.Cmd.Process.Pid}
	tp.init = podPid(t, p)
	tp.ns = holdNS(t, tp.init)
	waitSupervisorReady(t, p)
	waitFor(t, eventDeadline, "the hand-over", func() bool { return handedOver(tp.waiter) })
	tp.keeper = keeperOf(t, tp.waiter)
	return tp
}

func (tp *trickPod) stop(t *testing.T) {
	t.Helper()
	stopPod(t, tp.p, tp.r, tp.ns)
}

// An unknown trick's name is bad input: one line that names it, 254,
// and nothing of the pod started (no pid file, no cgroup).
func TestUnknownTrickRefused(t *testing.T) {
	p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
	r := runPod(t, p, RunOpts{Env: []string{starttricks.Env + "=shed,spair"}})
	if r.Code != 254 {
		t.Fatalf("exit %d, want 254; stderr %s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], starttricks.Env) || !strings.Contains(lines[0], `"spair"`) {
		t.Errorf("want one line naming %s and \"spair\", got %q", starttricks.Env, lines)
	}
	if _, err := os.Stat(filepath.Join(p.Dir, "pid")); err == nil {
		t.Error("a pid file was written")
	}
	if dirs := cgroupDirs(p); len(dirs) != 0 {
		t.Errorf("cgroups made: %q", dirs)
	}
}

// The tricks seen in the processes of a pod's life: each observation is
// checked on a pod with every trick on, and on a pod with that trick
// alone off.
func TestTricksOff(t *testing.T) {
	checks := []struct {
		trick starttricks.Trick
		// on reports whether the trick shows in tp, and what was seen.
		on func(t *testing.T, tp *trickPod) (bool, string)
	}{
		// The lock keeper holds the pod's commit pipe, and PID 1 its
		// end.
		{starttricks.Commit, func(t *testing.T, tp *trickPod) (bool, string) {
			k, i := fdTarget(tp.keeper, handover.KeeperCommitFd), fdTarget(tp.init, handover.CommitFd)
			return strings.HasPrefix(k, "pipe:") && strings.HasPrefix(i, "pipe:"), fmt.Sprintf("keeper's commit fd %q, PID 1's %q", k, i)
		}},
		// PID 1, pod1-pause and the keeper were executed through a
		// descriptor below 64, where the table did not grow.
		{starttricks.FDTable, func(t *testing.T, tp *trickPod) (bool, string) {
			var seen []string
			low := true
			for _, pid := range []int{tp.init, tp.keeper, pauseOf(t, tp.init)} {
				fn := execFn(t, pid)
				seen = append(seen, fn)
				n, err := strconv.Atoi(strings.TrimPrefix(fn, "/proc/self/fd/"))
				if err != nil {
					t.Fatalf("pid %d was executed through %q", pid, fn)
				}
				low = low && n < 64
			}
			return low, fmt.Sprintf("executed through %q", seen)
		}},
		// PID 1 keeps little of its code resident once the pod is
		// up. (The waiter and the keeper shed too, but keep about as
		// little without: they are said, not judged.)
		{starttricks.Shed, func(t *testing.T, tp *trickPod) (bool, string) {
			rss, size := codeRssKiB(t, tp.init)
			w, k := rssKiB(t, tp.waiter), rssKiB(t, tp.keeper)
			return size > 0 && rss < size/2, fmt.Sprintf("PID 1: %d of %d KiB of code resident; waiter %d KiB, keeper %d KiB", rss, size, w, k)
		}},
	}
	all := startTrickPod(t, "")
	for _, c := range checks {
		on, seen := within(t, all, c.on)
		if !on {
			t.Errorf("%s: not seen with every trick on: %s", c.trick.Name(), seen)
		}
		t.Logf("%s, every trick on: %s", c.trick.Name(), seen)
	}
	all.stop(t)
	for _, c := range checks {
		t.Run(c.trick.Name(), func(t *testing.T) {
			tp := startTrickPod(t, c.trick.Name())
			on, seen := within(t, tp, c.on)
			if on {
				t.Errorf("seen with %s=%s: %s", starttricks.Env, c.trick.Name(), seen)
			}
			t.Logf("off: %s", seen)
			tp.stop(t)
		})
	}
}

// within looks for a trick in tp until it is seen or a few seconds have
// passed: some show only once the pod has settled (shedding comes a
// little after the pod is ready), and a thread may be between two waits
// when it is looked at.
func within(t *testing.T, tp *trickPod, on func(*testing.T, *trickPod) (bool, string)) (bool, string) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		seen, what := on(t, tp)
		if seen || time.Now().After(deadline) {
			return seen, what
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The tricks of the start's order, seen in the system calls of a pod run
// under strace: the waiter's priming writes to its own cgroup.procs; the
// spare is forked (and executed, the clone being a vfork) before PID 1
// reads its configuration, and moved into its app's cgroup before PID 1
// pivots into its own root.
func TestTricksOffTraced(t *testing.T) {
	straceBin, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (Debian package strace)")
	}
	checks := []struct {
		trick starttricks.Trick
		on    func(tr *trace) (bool, string)
	}{
		{starttricks.Prime, func(tr *trace) (bool, string) {
			prime := tr.first(tr.waiter, openProcs)
			return prime >= 0, fmt.Sprintf("the waiter's first write to a cgroup.procs at line %d", prime)
		}},
		{starttricks.Spare, func(tr *trace) (bool, string) {
			spare := tr.first(-1, `execve\("/proc/self/exe", \["pod1-app"\]`)
			config := tr.first(-1, `(read\(3<pipe:\[\d+\]>, |read resumed>)"\{\\"uuid\\"`)
			move := tr.first(tr.init, openProcs)
			pivot := tr.first(tr.init, `pivot_root\(`)
			// The app took it: the spare cloned the app's process
			// (appexec.Launch), where a spare not taken is killed.
			launch := -1
			if spare >= 0 {
				launch = tr.first(tr.pids[spare], `clone3?\(.*CLONE_PARENT`)
			}
			return spare >= 0 && spare < config && move >= 0 && move < pivot && launch > spare,
				fmt.Sprintf("first pod1-app exec at line %d, PID 1's configuration read at line %d; PID 1's first move at line %d, its pivot at line %d; that pod1-app's launch at line %d", spare, config, move, pivot, launch)
		}},
	}
	run := func(t *testing.T, off string) *trace {
		t.Helper()
		out := filepath.Join(t.TempDir(), "strace")
		p := newPod(t, []App{{Name: "a", Exec: probe("exit", "0")}}, nil)
		r := runPod(t, p, RunOpts{
			Env:     []string{starttricks.Env + "=" + off},
			Wrapper: []string{straceBin, "-f", "-qq", "-y", "-e", "signal=none", "--decode-pids=pidns", "-e", "trace=execve,read,open,openat,pivot_root,clone,clone3", "-s", "64", "-o", out},
			Timeout: 2 * time.Minute,
		})
		if r.Code != 0 {
			t.Fatalf("exit %d under strace; stderr %s", r.Code, r.Stderr)
		}
		return readTrace(t, out)
	}
	all := run(t, "")
	for _, c := range checks {
		on, seen := c.on(all)
		if !on {
			t.Errorf("%s: not seen with every trick on: %s", c.trick.Name(), seen)
		}
		t.Logf("%s, every trick on: %s", c.trick.Name(), seen)
	}
	for _, c := range checks {
		t.Run(c.trick.Name(), func(t *testing.T) {
			on, seen := c.on(run(t, c.trick.Name()))
			if on {
				t.Errorf("seen with %s=%s: %s", starttricks.Env, c.trick.Name(), seen)
			}
			t.Logf("off: %s", seen)
		})
	}
}

// openProcs is an open of a cgroup.procs for writing: a move into a
// cgroup, or the waiter's priming.
const openProcs = `open(at)?\((AT_FDCWD[^,]*, )?"[^"]*/cgroup\.procs", O_WRONLY`

// trace is the output of strace -f: lines "TID call...", each with the
// process (thread group) of its thread.
type trace struct {
	lines        []string
	pids         []int
	waiter, init int
}

// cloneDone is the end of a clone's line: the new thread's id.
// (--decode-pids=pidns says it in strace's pid namespace, where the
// kernel's return is PID 1's).
var cloneDone = regexp.MustCompile(`= (\d+)(?: /\* (\d+) in strace's PID NS \*/)?$`)

func readTrace(t *testing.T, path string) *trace {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	var tids []int
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// strace pads the thread's id to a width.
		tidS, rest, _ := strings.Cut(strings.TrimLeft(sc.Text(), " "), " ")
		if tid, err := strconv.Atoi(tidS); err == nil {
			tids, lines = append(tids, tid), append(lines, strings.TrimLeft(rest, " "))
		}
	}
	must(t, sc.Err())
	// The threads of each process, from its clones of a thread: a
	// first pass, since a new thread's first calls may come before
	// the line that ends its clone.
	parent := map[int]int{}     // thread -> the thread that cloned it
	threading := map[int]bool{} // a thread whose clone of a thread is unfinished
	for i, rest := range lines {
		tid := tids[i]
		if strings.HasPrefix(rest, "clone") && strings.Contains(rest, "CLONE_THREAD") {
			threading[tid] = true
		}
		if threading[tid] && !strings.HasSuffix(rest, "<unfinished ...>") {
			threading[tid] = false
			if m := cloneDone.FindStringSubmatch(rest); m != nil {
				n, _ := strconv.Atoi(m[1])
				if m[2] != "" {
					n, _ = strconv.Atoi(m[2])
				}
				parent[n] = tid
			}
		}
	}
	process := func(tid int) int {
		for range 64 {
			p, ok := parent[tid]
			if !ok {
				break
			}
			tid = p
		}
		return tid
	}
	tr := &trace{lines: lines, init: -1}
	for i, rest := range lines {
		pid := process(tids[i])
		tr.pids = append(tr.pids, pid)
		if i == 0 {
			tr.waiter = pid
		}
		if tr.init < 0 && strings.Contains(rest, `execve(`) && strings.Contains(rest, `["pod1-init"`) {
			tr.init = pid
		}
	}
	if tr.init < 0 {
		t.Fatalf("no execve of pod1-init in %s (%d lines)", path, len(tr.lines))
	}
	return tr
}

// first is the index of the first line of pid (-1: any) matching re, or
// -1.
func (tr *trace) first(pid int, re string) int {
	rx := regexp.MustCompile(re)
	for i, l := range tr.lines {
		if (pid < 0 || tr.pids[i] == pid) && rx.MatchString(l) {
			return i
		}
	}
	return -1
}

func fdTarget(pid, fd int) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	return l
}

// pauseOf is pod1-pause, PID 1's child whose name is that.
func pauseOf(t *testing.T, init int) int {
	t.Helper()
	for _, c := range childrenOf(init) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c)); strings.TrimSpace(string(b)) == "pod1-pause" {
			return c
		}
	}
	t.Fatalf("PID 1 (%d) has no pod1-pause child", init)
	return 0
}

// execFn is the path pid was executed through (the auxiliary vector's
// AT_EXECFN, read from its memory).
func execFn(t *testing.T, pid int) string {
	t.Helper()
	const atExecFn = 31
	aux, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	must(t, err)
	var addr uint64
	for i := 0; i+16 <= len(aux); i += 16 {
		if binary.LittleEndian.Uint64(aux[i:]) == atExecFn {
			addr = binary.LittleEndian.Uint64(aux[i+8:])
		}
	}
	if addr == 0 {
		t.Fatalf("pid %d: no AT_EXECFN", pid)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	must(t, err)
	defer mem.Close()
	b := make([]byte, 256)
	n, err := mem.ReadAt(b, int64(addr))
	if n == 0 {
		t.Fatalf("pid %d: read its AT_EXECFN: %v", pid, err)
	}
	s, _, _ := strings.Cut(string(b[:n]), "\x00")
	return s
}

// rkt run passes its environment on to the stage1's run entry point: the
// tricks turned off there reach the pod (run says which with --debug),
// and an unknown name is refused by the stage1 with its one line and
// 254, the exit rkt run gives.
func TestRktTricksOff(t *testing.T) {
	r := newRkt(t)
	img := r.aci("ok", map[string]any{"exec": []string{"/bin/probe", "exit", "0"}}, nil)
	r.env = append(r.env, starttricks.Env+"=fdtable,spair")
	out, errOut, code := r.run("--insecure-options=image", img)
	if code != 254 || !strings.Contains(errOut, `"spair"`) {
		t.Fatalf("rkt run with %s=fdtable,spair: exit %d, want 254 with a line naming \"spair\"\nstdout: %s\nstderr: %s", starttricks.Env, code, out, errOut)
	}
	r.env = append(r.env, starttricks.Env+"=shed, fdtable")
	out, errOut, code = r.exec(rktTimeout, nil, append([]string{"--debug"}, r.runArgs("run", []string{"--insecure-options=image", img})...)...)
	if code != 0 {
		t.Fatalf("rkt run with %s=shed,fdtable: exit %d\nstdout: %s\nstderr: %s", starttricks.Env, code, out, errOut)
	}
	if want := "start-latency tricks off (" + starttricks.Env + "): shed,fdtable"; !strings.Contains(errOut, want) {
		t.Errorf("rkt --debug run: no %q in its output\nstderr: %s", want, errOut)
	}
}
