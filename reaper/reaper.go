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
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Exit is the end of a registered child.
type Exit struct {
	Pid    int
	Tag    any
	Status unix.WaitStatus
	Time   time.Time
	// NSPid is the pid the child had in the innermost pid namespace it
	// was in (what it saw as its own), 0 if not read: read only for a
	// child not registered while a claim is expected (Expect).
	NSPid int
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
	// While a claim is expected (Expect), the exits of unregistered
	// children are kept for Claim: a child whose pid is learnt after its
	// birth (one a set-up process cloned as the caller's child) may end
	// before it is claimed. At most maxUnclaimed are kept; lost counts
	// those dropped beyond.
	expecting int
	unclaimed map[int]Exit
	lost      bool
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
// it whenever Wakeup says a child has exited: one wake-up may
// stand for many exits, and the loop runs until wait4 reports none left
// (threats P3).
func (r *Reaper) Reap() []Exit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Exit
	for {
		var ws unix.WaitStatus
		// While a claim is expected, the next child to collect is
		// looked at first, as a zombie, so that a child not yet
		// registered (an app's process, whose pid its set-up has not
		// reported yet) keeps the pid it saw as its own: once
		// collected, /proc has nothing of it.
		target, nsPid := -1, 0
		if r.expecting > 0 {
			if pid := peekZombie(); pid > 0 {
				target = pid
				if _, ok := r.procs[pid]; !ok {
					nsPid = InnermostPid(pid)
				}
			}
		}
		// The syscall package's wait4, not x/sys/unix's: this runs at
		// every sweep of an idle pod, and PID 1's loop otherwise needs
		// no code of x/sys/unix then, whose pages it has shed
		// (stage1-init/pid1's shedUnusedMemory).
		pid, err := syscall.Wait4(target, (*syscall.WaitStatus)(&ws), syscall.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			// ECHILD (no children at all) or 0 (none exited yet).
			return out
		}
		e := Exit{Pid: pid, Status: ws, Time: time.Now()}
		if pid == target {
			e.NSPid = nsPid
		}
		tag, ok := r.procs[pid]
		if !ok {
			// An orphan re-parented to us: reaped so it does not
			// stay a zombie, and otherwise of no interest, unless a
			// claim is expected.
			r.orphans++
			r.keep(e)
			continue
		}
		delete(r.procs, pid)
		e.Tag = tag
		out = append(out, e)
	}
}

// maxUnclaimed bounds the exits kept for Claim: orphans a hostile app
// makes die by the thousand while a claim is expected must not grow the
// caller without bound.
const maxUnclaimed = 4096

// keep holds the exit of an unregistered child for Claim, while one is
// expected.
func (r *Reaper) keep(e Exit) {
	if r.expecting == 0 {
		return
	}
	if len(r.unclaimed) >= maxUnclaimed {
		r.lost = true
		return
	}
	if r.unclaimed == nil {
		r.unclaimed = map[int]Exit{}
	}
	r.unclaimed[e.Pid] = e
}

// Kept reports whether an exit of pid, a child not registered, is kept
// for a Claim.
func (r *Reaper) Kept(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.unclaimed[pid]
	return ok
}

// KeptNSPid is the pid a child not registered, whose exit is kept for a
// Claim, had in its innermost pid namespace; 0 if none is kept or it was
// not read.
func (r *Reaper) KeptNSPid(pid int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unclaimed[pid].NSPid
}

// peekZombie is the pid of a child waiting to be collected, left for
// wait4 (waitid with WNOWAIT), or 0 if none is.
func peekZombie() int {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0
		}
		return siginfoPid(&info)
	}
}

// siginfoPid is si_pid of a child's siginfo, which x/sys/unix does not
// name: the first field of the union after si_signo, si_errno and
// si_code, aligned as a pointer (its first member holds one).
func siginfoPid(info *unix.Siginfo) int {
	off := uintptr(16)
	if unsafe.Sizeof(uintptr(0)) == 4 {
		off = 12
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// InnermostPid is the last pid of /proc/PID/status's NSpid: pid's in the
// innermost pid namespace it is in (a zombie's too); 0 if it cannot be
// read.
func InnermostPid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// Expect opens a window in which the exits of children not registered
// are kept, for a Claim of one whose pid is not known yet; each Expect is
// closed by one Unexpect.
func (r *Reaper) Expect() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expecting++
}

// Unexpect closes a window Expect opened; with the last one closed the
// exits kept are dropped (orphans' exits, as they would have been).
func (r *Reaper) Unexpect() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expecting > 0 {
		r.expecting--
	}
	if r.expecting == 0 {
		r.unclaimed, r.lost = nil, false
	}
}

// Claim registers pid, a child of ours whose pid was learnt after its
// birth, under tag, within a window Expect opened. If its exit was
// already collected, it is returned (ok) instead, with the tag, and pid
// is not registered: the caller handles it as one Reap returned. A
// child whose exit was dropped (more than maxUnclaimed kept) and that is
// gone is reported as killed: its end cannot have been a success the
// caller would miss.
func (r *Reaper) Claim(pid int, tag any) (e Exit, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.unclaimed[pid]; ok {
		delete(r.unclaimed, pid)
		r.orphans--
		e.Tag = tag
		return e, true
	}
	if r.lost && !alive(pid) {
		return Exit{Pid: pid, Tag: tag, Status: unix.WaitStatus(unix.SIGKILL), Time: time.Now()}, true
	}
	r.procs[pid] = tag
	return Exit{}, false
}

// alive reports whether pid is a process not yet reaped (a zombie
// included).
func alive(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// Forget unregisters pid: its exit, if still to come, is an orphan's.
func (r *Reaper) Forget(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs, pid)
}

// Wakeup returns the channel on which the reaper says that a child may
// have exited; after each receive the caller calls Reap, which collects
// every exit there is. It is SIGCHLD, through the runtime's signal
// handler, and is called once. A child that exited before the handler was
// in sent its signal to no one, so the first receive comes at once;
// signals that come while a wake-up waits are one wake-up. A thread
// blocked in waitid(P_ALL, WEXITED|WNOWAIT) woke the caller instead, with
// fewer threads woken in turn, and measured no faster (docs/design-start.md).
func (r *Reaper) Wakeup() <-chan struct{} {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	out := make(chan struct{}, 1)
	out <- struct{}{}
	go func() {
		for range sig {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
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
