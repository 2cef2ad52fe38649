package seccomp

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6].
// Both architectures built for are little-endian, so an argument's low
// word comes first.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

func argLow(i int) uint32  { return uint32(offArgs + 8*i) }
func argHigh(i int) uint32 { return uint32(offArgs + 8*i + 4) }

// maxInsns is the kernel's BPF_MAXINSNS.
const maxInsns = 4096

// namespaceFlags are clone(2)'s flags that create namespaces (clone's
// CLONE_NEWTIME bit is CSIGNAL's and cannot be checked there).
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// implicitlyAllowed are let through by every allow-list: without them the
// app could not even be started or end (systemd, which ran rkt's apps,
// allowed the same set implicitly).
var implicitlyAllowed = []string{"execve", "exit", "exit_group", "rt_sigreturn"}

// program is a BPF program under construction with forward labels.
type program struct {
	insns  []unix.SockFilter
	fixups []fixup
	labels map[string]int
	n      int
}

type fixup struct {
	at     int
	jt, jf string
}

func (p *program) stmt(code uint16, k uint32) {
	p.insns = append(p.insns, unix.SockFilter{Code: code, K: k})
}

// jump emits a conditional jump; an empty label means the next insn.
func (p *program) jump(code uint16, k uint32, jt, jf string) {
	p.fixups = append(p.fixups, fixup{len(p.insns), jt, jf})
	p.stmt(unix.BPF_JMP|code|unix.BPF_K, k)
}

func (p *program) newLabel() string {
	p.n++
	return fmt.Sprintf("L%d", p.n)
}

func (p *program) label(l string) { p.labels[l] = len(p.insns) }

func (p *program) load(off uint32)   { p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
func (p *program) ret(action uint32) { p.stmt(unix.BPF_RET|unix.BPF_K, action) }

// onEqual emits "if A == k, return action".
func (p *program) onEqual(k, action uint32) {
	skip := p.newLabel()
	p.jump(unix.BPF_JEQ, k, "", skip)
	p.ret(action)
	p.label(skip)
}

func (p *program) resolve() ([]unix.SockFilter, error) {
	off := func(from int, l string) (uint8, error) {
		if l == "" {
			return 0, nil
		}
		to, ok := p.labels[l]
		d := to - from - 1
		if !ok || d < 0 || d > 255 {
			return 0, fmt.Errorf("bad jump to %s", l)
		}
		return uint8(d), nil
	}
	for _, f := range p.fixups {
		var err1, err2 error
		p.insns[f.at].Jt, err1 = off(f.at, f.jt)
		p.insns[f.at].Jf, err2 = off(f.at, f.jf)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("assemble: %w", errors.Join(err1, err2))
		}
	}
	if len(p.insns) > maxInsns {
		return nil, fmt.Errorf("filter of %d instructions exceeds the kernel's %d", len(p.insns), maxInsns)
	}
	return p.insns, nil
}

// refusal is the action for a refused call.
func (f *Filter) refusal() uint32 {
	if f.Errno == 0 {
		return unix.SECCOMP_RET_KILL_PROCESS
	}
	return unix.SECCOMP_RET_ERRNO | uint32(f.Errno)&unix.SECCOMP_RET_DATA
}

// Assemble compiles the filter. In order: a call of another architecture
// (or, on x86-64, of the x32 ABI) kills the process, as libseccomp's
// default did for rkt, since its numbers mean other calls; the app may
// restore its own RLIMIT_NOFILE (Go's syscall.Exec does so on the way to
// execve); when unshare is refused, so is clone with namespace flags, and
// clone3, whose flags are out of a filter's reach, fails with ENOSYS so
// that libc falls back to clone (Docker's rule); then the listed calls;
// then the default.
func (f *Filter) Assemble() ([]unix.SockFilter, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	p := &program{labels: map[string]int{}}
	p.load(offArch)
	p.killUnless(nativeArch)
	p.load(offNr)
	if x32Bit != 0 {
		ok := p.newLabel()
		p.jump(unix.BPF_JGE, x32Bit, "", ok)
		p.ret(unix.SECCOMP_RET_KILL_PROCESS)
		p.label(ok)
	}
	f.nofileCarveOut(p)
	f.launchCarveOut(p)
	refuseForgedFaults(p)
	allow, refuse := uint32(unix.SECCOMP_RET_ALLOW), f.refusal()
	if f.Mode == ModeAllow {
		for _, name := range implicitlyAllowed {
			p.onEqual(syscallNumbers[name], allow)
		}
	}
	if f.refuses("unshare") && !f.refuses("clone") {
		after, ok := p.newLabel(), p.newLabel()
		p.jump(unix.BPF_JEQ, syscallNumbers["clone"], "", after)
		p.load(argLow(0))
		p.jump(unix.BPF_JSET, namespaceFlags, "", ok)
		p.ret(refuse)
		p.label(ok)
		p.load(offNr)
		p.label(after)
		if nr, ok := syscallNumbers["clone3"]; ok && !f.refuses("clone3") {
			p.onEqual(nr, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
		}
	}
	match, other := refuse, allow
	if f.Mode == ModeAllow {
		match, other = allow, refuse
	}
	nrs := make([]uint32, 0, len(f.Syscalls))
	for _, name := range f.Syscalls {
		nr, ok := syscallNumbers[name]
		if !ok {
			return nil, fmt.Errorf("unknown system call %q", name)
		}
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	for _, nr := range slices.Compact(nrs) {
		p.onEqual(nr, match)
	}
	p.ret(other)
	return p.resolve()
}

// killUnless emits "unless A == k, kill the process".
func (p *program) killUnless(k uint32) {
	ok := p.newLabel()
	p.jump(unix.BPF_JEQ, k, ok, "")
	p.ret(unix.SECCOMP_RET_KILL_PROCESS)
	p.label(ok)
}

// nofileCarveOut lets prlimit64(0, RLIMIT_NOFILE, ...) through when the
// filter would otherwise refuse prlimit64: the stage1 restores the app's
// original open-file limit that way just before execve.
func (f *Filter) nofileCarveOut(p *program) {
	nr, ok := syscallNumbers["prlimit64"]
	if !ok || !f.refuses("prlimit64") {
		return
	}
	after, fail := p.newLabel(), p.newLabel()
	p.jump(unix.BPF_JEQ, nr, "", after)
	for _, c := range []struct{ off, want uint32 }{
		{argLow(0), 0}, {argHigh(0), 0}, {argLow(1), unix.RLIMIT_NOFILE}, {argHigh(1), 0},
	} {
		p.load(c.off)
		p.jump(unix.BPF_JEQ, c.want, "", fail)
	}
	p.ret(unix.SECCOMP_RET_ALLOW)
	p.label(fail)
	p.load(offNr)
	p.label(after)
}

// LaunchGateFd is where the app's process waits, before its execve, for
// the pod's first apps to exist (appexec's Launch): a read of it alone.
const LaunchGateFd = 6

// LaunchCloneFlags are the clone flags of the stage1's last call on the
// thread that made an app's process ready (appexec's Launch): a plain
// fork whose child is the caller's parent's.
const LaunchCloneFlags = unix.CLONE_PARENT

// launchCarveOut lets through, when the filter would refuse them, the
// calls the stage1 makes under the app's filter: the filter is installed
// before the app's process is cloned, so that it is born with it and with
// the app's credentials, and no instant of it holds more than the app
// (threats T24). The set-up thread then drops its capabilities to the
// app's (capset), clones the process (clone with LaunchCloneFlags
// exactly) and exits (exit); the process waits at its gate (a read of
// LaunchGateFd), closes the set-up's descriptors (close_range), makes a
// session of its own (setsid), takes its terminal (ioctl(0, TIOCSCTTY,
// 0)), moves a socket-activated app's sockets to fds 3.. (dup3), writes
// its own pid into LISTEN_PID (getpid) and execs. None of them gives a
// process anything: capset cannot raise the permitted set, the clone is a
// fork, the ioctl only takes a terminal that is no other session's, dup3
// copies a descriptor the process holds.
func (f *Filter) launchCarveOut(p *program) {
	for _, name := range []string{"capset", "setsid", "exit", "close_range", "dup3", "getpid"} {
		if nr, ok := syscallNumbers[name]; ok && f.refuses(name) {
			p.onEqual(nr, unix.SECCOMP_RET_ALLOW)
		}
	}
	exact := func(name string, args ...uint64) {
		nr, ok := syscallNumbers[name]
		if !ok || !f.refuses(name) {
			return
		}
		after, fail := p.newLabel(), p.newLabel()
		p.jump(unix.BPF_JEQ, nr, "", after)
		for i, a := range args {
			p.load(argLow(i))
			p.jump(unix.BPF_JEQ, uint32(a), "", fail)
			p.load(argHigh(i))
			p.jump(unix.BPF_JEQ, uint32(a>>32), "", fail)
		}
		p.ret(unix.SECCOMP_RET_ALLOW)
		p.label(fail)
		p.load(offNr)
		p.label(after)
	}
	exact("clone", LaunchCloneFlags)
	exact("ioctl", 0, unix.TIOCSCTTY, 0)
	exact("read", LaunchGateFd)
}

// forgedFaults are the signals the Go runtime of the pod's PID 1 takes for
// a fault of its own when they come with a si_code a process may choose
// (sigqueue's SI_QUEUE, anything but kill's SI_USER and tgkill's
// SI_TKILL): it crashes, whatever os/signal was told. A pid namespace's
// init receives every signal it has a handler for, and Go has one for
// each of these, so an app must not be able to queue them.
var forgedFaults = []uint32{
	uint32(unix.SIGILL), uint32(unix.SIGTRAP), uint32(unix.SIGBUS), uint32(unix.SIGFPE),
	uint32(unix.SIGSEGV), uint32(unix.SIGSTKFLT), uint32(unix.SIGSYS),
}

// refuseForgedFaults refuses, with EPERM and in every filter, the calls
// that send a signal with a caller-made siginfo when the signal is one of
// forgedFaults: rt_sigqueueinfo, rt_tgsigqueueinfo, and pidfd_send_signal
// with a siginfo (without one the kernel makes it SI_USER, as kill does).
func refuseForgedFaults(p *program) {
	for _, c := range []struct {
		name      string
		sig, info int // argument indexes; info -1: always has one
	}{
		{"rt_sigqueueinfo", 1, -1}, {"rt_tgsigqueueinfo", 2, -1}, {"pidfd_send_signal", 1, 2},
	} {
		nr, ok := syscallNumbers[c.name]
		if !ok {
			continue
		}
		after, check, deny, pass := p.newLabel(), p.newLabel(), p.newLabel(), p.newLabel()
		p.jump(unix.BPF_JEQ, nr, "", after)
		if c.info >= 0 {
			p.load(argLow(c.info))
			p.jump(unix.BPF_JEQ, 0, "", check)
			p.load(argHigh(c.info))
			p.jump(unix.BPF_JEQ, 0, pass, check)
		}
		p.label(check)
		p.load(argLow(c.sig))
		for _, sig := range forgedFaults {
			p.jump(unix.BPF_JEQ, sig, deny, "")
		}
		p.jump(unix.BPF_JEQ, 0, pass, pass)
		p.label(deny)
		p.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
		p.label(pass)
		p.load(offNr)
		p.label(after)
	}
}
