// Package reaper is the single owner of wait4 in a stage1 process: it
// registers the children it is asked to start, collects every exit with
// wait4(-1, WNOHANG) (its own children and the orphans the kernel
// re-parents to it), and hands the exits of registered children back to
// the caller. It knows nothing of pods, files or policy.
//
// No other code in a process that uses a Reaper may wait for a child
// (os/exec's Wait, os.Process.Wait): two waiters race for the same exit
// and the loser sees ECHILD, which is how other runtimes recorded false
// zeros (threats P2).
package reaper

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Exit is the end of a registered child.
type Exit struct {
	Pid    int
	Tag    any
	Status unix.WaitStatus
	Time   time.Time
}

// Reaper tracks registered children. Its methods are safe for concurrent
// use, but the intended use is one event loop calling Start and Reap.
type Reaper struct {
	// mu is held across the fork in Start and across the wait4 loop in
	// Reap, so a child can never be reaped before it is registered
	// (containerd's subscribe-before-start).
	mu      sync.Mutex
	procs   map[int]any
	orphans uint64
}

// New returns an empty Reaper.
func New() *Reaper {
	return &Reaper{procs: make(map[int]any)}
}

// SetSubreaper makes the calling process the reaper of its orphaned
// descendants (it is implicit for PID 1 of a pid namespace).
func SetSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Start calls fork, which must start exactly one child and return its pid,
// and registers the pid under tag before any exit can be collected: Reap
// takes the same lock, so the exit of a child that dies at once waits for
// its registration instead of being dropped as an orphan's.
func (r *Reaper) Start(tag any, fork func() (int, error)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	r.procs[pid] = tag
	return pid, nil
}

// Retag gives a registered child a new tag, and reports whether pid was
// registered (a child already reaped is not).
func (r *Reaper) Retag(pid int, tag any) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.procs[pid]; !ok {
		return false
	}
	r.procs[pid] = tag
	return true
}

// Registered reports whether pid is a registered child not yet reaped.
func (r *Reaper) Registered(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.procs[pid]
	return ok
}

// Running reports how many registered children have not been reaped.
func (r *Reaper) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.procs)
}

// Orphans reports how many unregistered processes (re-parented orphans)
// have been reaped so far.
func (r *Reaper) Orphans() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}

// Reap collects every child that has exited, without blocking, and returns
// the exits of registered children in the order they were collected. Call
// it on every SIGCHLD: signals coalesce, so one SIGCHLD may stand for many
// exits, and the loop runs until wait4 reports none left (threats P3).
func (r *Reaper) Reap() []Exit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Exit
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			// ECHILD (no children at all) or 0 (none exited yet).
			return out
		}
		e := Exit{Pid: pid, Status: ws, Time: time.Now()}
		tag, ok := r.procs[pid]
		if !ok {
			// An orphan re-parented to us: reaped so it does not
			// stay a zombie, and otherwise of no interest.
			r.orphans++
			continue
		}
		delete(r.procs, pid)
		e.Tag = tag
		out = append(out, e)
	}
}

// WaitAll blocks until the process has no children left, collecting every
// exit. It returns the exits of registered children.
func (r *Reaper) WaitAll() []Exit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Exit
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return out
		}
		if tag, ok := r.procs[pid]; ok {
			delete(r.procs, pid)
			out = append(out, Exit{Pid: pid, Tag: tag, Status: ws, Time: time.Now()})
		} else {
			r.orphans++
		}
	}
}
