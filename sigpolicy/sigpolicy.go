// Package sigpolicy is the one table of what each signal means to the
// stage1's long-lived processes, the run process (it holds the pod's lock
// and waits for PID 1) and the pod's PID 1, and the code that installs it.
//
// Every signal from 1 to 64 has an entry, kept as plain data (Of, Table)
// so that any other process that takes over a part of that job (a lean
// waiter in place of run, issue 16) can be generated from it or checked
// against it, and so that tests derive what they expect from it.
//
// Why every signal needs a deliberate entry in a Go program: the runtime
// installs a handler for almost every signal at start-up, and without
// os/signal registration SIGHUP, SIGINT and SIGTERM make it exit, while
// SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGSTKFLT, SIGSYS and a SIGSEGV,
// SIGBUS or SIGFPE sent by kill(2) make it crash with a traceback. A pid
// namespace's init receives from inside its namespace every signal it has
// a handler for, so any root app could crash a Go PID 1 (threats T20).
package sigpolicy

import (
	"os"
	"os/signal"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Action is what a signal does.
type Action uint8

const (
	// Ignore: dropped. Either the kernel drops it (SIG_IGN) or the
	// runtime's handler does (signal.Ignore marks it; a SIGSEGV, SIGBUS,
	// SIGFPE, SIGILL or SIGTRAP that a process sent is then dropped,
	// while a real fault still panics).
	Ignore Action = iota
	// Stop asks for a graceful stop of the pod.
	Stop
	// ForceStop asks for a forced stop: every app killed at once,
	// every status still written.
	ForceStop
	// Runtime marks the signals the Go runtime uses itself (SIGCHLD,
	// SIGURG for preemption, SIGPROF, and signal 33 for its all-threads
	// system calls): its handler does its work and drops a stray one.
	// They must stay with the runtime: SIG_IGN on SIGCHLD would make the
	// kernel reap our children before we see their status, and on
	// SIGURG it would end asynchronous preemption.
	Runtime
	// Uncatchable: SIGKILL and SIGSTOP.
	Uncatchable
)

func (a Action) String() string {
	switch a {
	case Ignore:
		return "ignore"
	case Stop:
		return "stop"
	case ForceStop:
		return "force-stop"
	case Runtime:
		return "runtime"
	case Uncatchable:
		return "uncatchable"
	}
	return "unknown"
}

// sigPerThreadSyscall is the signal a Go program without cgo uses to run a
// system call on every thread (runtime.sigPerThreadSyscall, SIGRTMIN+1).
const sigPerThreadSyscall = unix.Signal(33)

// SigPoweroff is systemd's SIGRTMIN+4 (glibc's SIGRTMIN, 34, plus 4):
// what `machinectl poweroff` sends a machine's leader, the pod's PID 1,
// and what systemd as a container's init (rkt's stage1) took as "power
// off", a graceful stop. musl's SIGRTMIN differs: the number is fixed.
const SigPoweroff = unix.Signal(38)

// Of returns what sig means to run and to PID 1 (the same for both: run
// forwards what PID 1 acts on).
func Of(sig unix.Signal) Action {
	switch sig {
	case unix.SIGHUP, unix.SIGINT, unix.SIGTERM, SigPoweroff:
		return Stop
	case unix.SIGUSR1, unix.SIGQUIT:
		// SIGUSR1 is what stop --force sends; SIGQUIT is Ctrl-\ on
		// the terminal of rkt run, the "quit now" key.
		return ForceStop
	case unix.SIGKILL, unix.SIGSTOP:
		return Uncatchable
	case unix.SIGCHLD, unix.SIGURG, unix.SIGPROF, sigPerThreadSyscall:
		return Runtime
	}
	return Ignore
}

// Max is the highest signal number on Linux.
const Max = 64

// Table returns the action of every signal from 1 to Max, indexed by
// signal number (index 0 unused).
func Table() [Max + 1]Action {
	var t [Max + 1]Action
	for s := 1; s <= Max; s++ {
		t[s] = Of(unix.Signal(s))
	}
	return t
}

// Forward is the signal that carries a request of action a to PID 1: what
// run sends when it is asked, and what the stop entry point sends.
func Forward(a Action) unix.Signal {
	if a == ForceStop {
		return unix.SIGUSR1
	}
	return unix.SIGTERM
}

// Request is the action a stop asks for: a forced stop (stop --force) or
// a graceful one.
func Request(force bool) Action {
	if force {
		return ForceStop
	}
	return Stop
}

// Requests is the stop asked of this process so far. A request only ever
// rises (none, then Stop, then ForceStop), so however many signals arrive
// and however late they are read, none of a different meaning is lost.
type Requests struct {
	// C receives a value whenever the request rises; one slot, so a
	// burst of signals is one wake-up.
	C     <-chan struct{}
	c     chan struct{}
	level atomic.Uint32
	why   atomic.Pointer[string]
}

// Level is the highest request so far: Ignore (none), Stop or ForceStop.
func (r *Requests) Level() Action { return Action(r.level.Load()) }

// Why says what raised the request to its level.
func (r *Requests) Why() string {
	if p := r.why.Load(); p != nil {
		return *p
	}
	return ""
}

// Raise records a request (from a signal, or from the death of the
// parent) and wakes the reader of C.
func (r *Requests) Raise(a Action, why string) {
	if a != Stop && a != ForceStop {
		return
	}
	for {
		old := r.level.Load()
		if uint32(a) <= old {
			// Nothing new; still wake the reader, who may want to
			// pass a repeated request on.
			break
		}
		if r.level.CompareAndSwap(old, uint32(a)) {
			r.why.Store(&why)
			break
		}
	}
	select {
	case r.c <- struct{}{}:
	default:
	}
}

// Listen installs the table in the calling process and returns where its
// stop requests arrive. Call it first thing: before it, the runtime's
// defaults apply.
func Listen() *Requests {
	r := &Requests{c: make(chan struct{}, 1)}
	r.C = r.c
	// One channel per meaning: when one fills up, what is dropped means
	// what is already queued.
	stop := make(chan os.Signal, 4)
	force := make(chan os.Signal, 4)
	var stops, forces, ignored []os.Signal
	for s := unix.Signal(1); s <= Max; s++ {
		switch Of(s) {
		case Stop:
			stops = append(stops, s)
		case ForceStop:
			forces = append(forces, s)
		case Ignore:
			ignored = append(ignored, s)
		}
	}
	signal.Notify(stop, stops...)
	signal.Notify(force, forces...)
	// Ignored only once the stop signals are registered: whoever sees
	// them ignored (SigIgn) can rely on the whole table being in.
	signal.Ignore(ignored...)
	// The runtime leaves some signals to the kernel's default in a
	// program without cgo (32, 34: glibc's and musl's internal ones), and
	// signal.Ignore changes nothing for those: their default would end
	// us. Whatever still has the default now gets SIG_IGN.
	for _, s := range ignored {
		ignoreIfDefault(s.(unix.Signal))
	}
	go func() {
		for {
			select {
			case s := <-stop:
				r.Raise(Stop, s.String()+" received")
			case s := <-force:
				r.Raise(ForceStop, s.String()+" received")
			}
		}
	}()
	return r
}

// ignoreIfDefault sets sig's disposition to SIG_IGN if it is SIG_DFL, with
// rt_sigaction directly: the runtime has no handler for it and does not
// use it.
func ignoreIfDefault(sig unix.Signal) {
	// struct kernel_sigaction: handler (0 = SIG_DFL, 1 = SIG_IGN),
	// flags, restorer, mask.
	var old [4]uint64
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 || old[0] != 0 {
		return
	}
	act := [4]uint64{1}
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}
