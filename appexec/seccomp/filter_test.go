//go:build linux && (amd64 || arm64)

package seccomp

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// call is a struct seccomp_data.
type call struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

func (c call) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[offNr:], c.nr)
	binary.LittleEndian.PutUint32(b[offArch:], c.arch)
	for i, a := range c.args {
		binary.LittleEndian.PutUint64(b[offArgs+8*i:], a)
	}
	return b
}

// run interprets the subset of classic BPF the assembler emits, the way
// the kernel's seccomp does (32-bit loads in native byte order).
func run(t *testing.T, prog []unix.SockFilter, c call) uint32 {
	t.Helper()
	data := c.bytes()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			a = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var cond bool
			switch in.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JEQ:
				cond = a == in.K
			case unix.BPF_JGE:
				cond = a >= in.K
			case unix.BPF_JSET:
				cond = a&in.K != 0
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("insn %d: unexpected code %#x", pc, in.Code)
		}
	}
	t.Fatal("fell off the end of the program")
	return 0
}

func nr(name string) uint32 { return syscallNumbers[name] }

func native(name string, args ...uint64) call {
	c := call{nr: nr(name), arch: nativeArch}
	copy(c.args[:], args)
	return c
}

const (
	allow = unix.SECCOMP_RET_ALLOW
	kill  = unix.SECCOMP_RET_KILL_PROCESS
)

func errno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

func mustParse(t *testing.T, mode string, set []string, e string) []unix.SockFilter {
	t.Helper()
	f, err := Parse(mode, set, e)
	if err != nil || f == nil {
		t.Fatalf("parse %v: %v", set, err)
	}
	prog, err := f.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func TestDefaultFilter(t *testing.T) {
	f, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := f.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		c    call
		want uint32
	}{
		{native("read"), allow},
		{native("mount"), errno(unix.EPERM)},
		{native("umount2"), errno(unix.EPERM)},
		{native("ptrace"), errno(unix.EPERM)},
		{native("io_uring_setup"), errno(unix.EPERM)},
		{native("open_tree"), errno(unix.EPERM)},
		{native("unshare"), errno(unix.EPERM)},
		{native("clone", uint64(unix.SIGCHLD)), allow},
		{native("clone", unix.CLONE_VM|unix.CLONE_THREAD), allow},
		{native("clone", unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), errno(unix.EPERM)},
		{native("clone", unix.CLONE_NEWNET), errno(unix.EPERM)},
		{native("clone3"), errno(unix.ENOSYS)},
		{native("prlimit64", 0, unix.RLIMIT_NOFILE), allow},
		{call{nr: nr("read"), arch: 0x40000003}, kill},
		// A fault signal queued with a made-up siginfo would crash the
		// Go runtime of PID 1; kill's and tgkill's are told apart.
		{native("rt_sigqueueinfo", 1, uint64(unix.SIGSEGV), 0x1000), errno(unix.EPERM)},
		{native("rt_sigqueueinfo", 1, uint64(unix.SIGSYS), 0x1000), errno(unix.EPERM)},
		{native("rt_sigqueueinfo", 1, uint64(unix.SIGUSR2), 0x1000), allow},
		{native("rt_tgsigqueueinfo", 1, 1, uint64(unix.SIGBUS), 0x1000), errno(unix.EPERM)},
		{native("rt_tgsigqueueinfo", 1, 1, uint64(unix.SIGTERM), 0x1000), allow},
		{native("pidfd_send_signal", 3, uint64(unix.SIGFPE), 0x1000), errno(unix.EPERM)},
		{native("pidfd_send_signal", 3, uint64(unix.SIGFPE), 0), allow},
		{native("pidfd_send_signal", 3, uint64(unix.SIGFPE), 1<<40), errno(unix.EPERM)},
		{native("kill", 1, uint64(unix.SIGSEGV)), allow},
	}
	if x32Bit != 0 {
		cases = append(cases, struct {
			c    call
			want uint32
		}{call{nr: nr("mount") | x32Bit, arch: nativeArch}, kill})
	}
	for _, c := range cases {
		if got := run(t, prog, c.c); got != c.want {
			t.Errorf("nr %d arch %#x args %v: %#x, want %#x", c.c.nr, c.c.arch, c.c.args[:2], got, c.want)
		}
	}
}

func TestAllowList(t *testing.T) {
	prog := mustParse(t, ModeAllow, []string{"read", "write", "clone"}, "ENOSYS")
	cases := []struct {
		c    call
		want uint32
	}{
		{native("read"), allow},
		{native("openat"), errno(unix.ENOSYS)},
		// Implicit: the app could not start or end without them.
		{native("execve"), allow},
		{native("exit_group"), allow},
		// Only the stage1's own restore of the open-file limit.
		{native("prlimit64", 0, unix.RLIMIT_NOFILE), allow},
		{native("prlimit64", 0, unix.RLIMIT_NPROC), errno(unix.ENOSYS)},
		{native("prlimit64", 1, unix.RLIMIT_NOFILE), errno(unix.ENOSYS)},
		{native("prlimit64", 1<<32, unix.RLIMIT_NOFILE), errno(unix.ENOSYS)},
		// unshare is not allowed, so clone may not create namespaces.
		{native("clone", uint64(unix.SIGCHLD)), allow},
		{native("clone", unix.CLONE_NEWPID), errno(unix.ENOSYS)},
	}
	for _, c := range cases {
		if got := run(t, prog, c.c); got != c.want {
			t.Errorf("nr %d args %v: %#x, want %#x", c.c.nr, c.c.args[:2], got, c.want)
		}
	}
	killing := mustParse(t, ModeAllow, []string{"read"}, "")
	if got := run(t, killing, native("openat")); got != kill {
		t.Errorf("no errno: %#x, want kill", got)
	}
}

func TestDenyList(t *testing.T) {
	prog := mustParse(t, ModeDeny, []string{"@rkt/default-blacklist", "socket"}, "ENOTSUP")
	for name, want := range map[string]uint32{
		"socket": errno(unix.EOPNOTSUPP), "umount2": errno(unix.EOPNOTSUPP),
		"read": allow, "io_uring_setup": allow, "prlimit64": allow,
	} {
		if got := run(t, prog, native(name)); got != want {
			t.Errorf("%s: %#x, want %#x", name, got, want)
		}
	}
	// unshare is refused, so clone may not create namespaces either.
	if got := run(t, prog, native("clone", unix.CLONE_NEWUSER)); got != errno(unix.EOPNOTSUPP) {
		t.Errorf("clone(CLONE_NEWUSER): %#x", got)
	}
	// A deny-list without unshare leaves namespaces alone.
	open := mustParse(t, ModeDeny, []string{"socket"}, "EPERM")
	if got := run(t, open, native("clone", unix.CLONE_NEWUSER)); got != allow {
		t.Errorf("clone(CLONE_NEWUSER) with unshare allowed: %#x", got)
	}
}

func TestParse(t *testing.T) {
	if f, err := Parse(ModeAllow, []string{"read", WildcardAll}, ""); f != nil || err != nil {
		t.Errorf("@appc.io/all in a retain-set: %v %v, want no filter", f, err)
	}
	def, _ := Default()
	if f, err := Parse(ModeDeny, []string{WildcardEmpty}, ""); err != nil || fmt.Sprint(f) != fmt.Sprint(def) {
		t.Errorf("@appc.io/empty in a remove-set: %v %v, want the default", f, err)
	}
	// chown32 is not an amd64 or arm64 call: skipped inside a wildcard.
	if f, err := Parse(ModeAllow, []string{"@docker/default-whitelist"}, ""); err != nil || strings.Contains(strings.Join(f.Syscalls, " "), "chown32") {
		t.Errorf("docker whitelist: %v", err)
	}
	for _, c := range []struct {
		mode  string
		set   []string
		errno string
		want  string
	}{
		{ModeDeny, nil, "", "set must be non-empty"},
		{ModeDeny, []string{"nosuchcall"}, "", `unknown system call "nosuchcall"`},
		{ModeDeny, []string{"chown32"}, "", `unknown system call "chown32"`},
		{ModeDeny, []string{"@rkt/nope"}, "", `unknown wildcard "@rkt/nope"`},
		{ModeAllow, []string{"@systemd/clock"}, "", "need a systemd stage1"},
		{ModeDeny, []string{"read"}, "EBOGUS", `unknown errno "EBOGUS"`},
		{ModeDeny, []string{WildcardAll}, "", "would leave no system call"},
		{ModeAllow, []string{WildcardEmpty}, "", "would leave no system call"},
		{ModeDeny, []string{"execve"}, "", "execve cannot be removed"},
	} {
		if _, err := Parse(c.mode, c.set, c.errno); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v %q: %v, want %q", c.mode, c.set, c.errno, err, c.want)
		}
	}
}

// Every call of the architecture fits in an allow-list: the program stays
// within the kernel's instruction limit.
func TestLargestFilterFits(t *testing.T) {
	var all []string
	for n := range syscallNumbers {
		all = append(all, n)
	}
	prog := mustParse(t, ModeAllow, all, "EPERM")
	if len(prog) > maxInsns {
		t.Fatalf("%d instructions", len(prog))
	}
	if got := run(t, prog, native("openat")); got != allow {
		t.Errorf("openat: %#x", got)
	}
}

func TestErrnoNumber(t *testing.T) {
	for name, want := range map[string]unix.Errno{"EPERM": unix.EPERM, "ENOSYS": unix.ENOSYS, "ENOTSUP": unix.EOPNOTSUPP, "EACCES": unix.EACCES} {
		if n, err := ErrnoNumber(name); err != nil || n != int(want) {
			t.Errorf("%s: %d %v", name, n, err)
		}
	}
}
