package tests

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/pod1/pod1/status"
)

func seccompSet(kind string, errno string, set ...string) map[string]any {
	v := map[string]any{"set": set}
	if errno != "" {
		v["errno"] = errno
	}
	return isolator("os/linux/seccomp-"+kind+"-set", v)
}

// The calls each case makes, and what the filter must answer. unshare(0)
// and clone(CLONE_NEWUSER) succeed for root without a filter; sysinfo and
// io_uring_setup with a NULL buffer fail with EFAULT when they reach the
// kernel, so any other errno is the filter's.
var seccompProbe = probe("status", "+", "syscall", "unshare", "0", "+", "clone-ns", "user", "+",
	"syscall", "clone3", "+", "syscall", "io_uring_setup", "+", "syscall", "sysinfo", "+", "syscall", "getcpu")

// The filter is read back by the app (Seccomp: 2) and each blocked call
// returns the configured errno; the default filter blocks what rkt's did
// (and namespace creation through clone); --disable-seccomp is the
// negative control.
func TestSeccompFilters(t *testing.T) {
	cases := []struct {
		name string
		isos []map[string]any
		args []string
		want []string
	}{
		{"default", nil, nil, []string{"status Seccomp: 2", "syscall unshare EPERM", "clone-ns user EPERM",
			"syscall clone3 ENOSYS", "syscall io_uring_setup EPERM", "syscall sysinfo EFAULT", "syscall getcpu ok"}},
		{"disabled", nil, []string{"--net=none", "--disable-seccomp"}, []string{"status Seccomp: 0", "syscall unshare ok",
			"clone-ns user ok", "syscall sysinfo EFAULT"}},
		{"disabled-with-isolator", []map[string]any{seccompSet("remove", "ENOTSUP", "sysinfo")}, []string{"--net=none", "--disable-seccomp"},
			[]string{"status Seccomp: 0", "syscall sysinfo EFAULT"}},
		{"remove-set-errno", []map[string]any{seccompSet("remove", "ENOTSUP", "@rkt/default-blacklist", "sysinfo")}, nil,
			[]string{"status Seccomp: 2", "syscall unshare ENOTSUP", "clone-ns user ENOTSUP", "syscall sysinfo ENOTSUP",
				"syscall io_uring_setup EFAULT", "syscall getcpu ok"}},
		// A remove-set that leaves unshare allowed leaves namespaces alone.
		{"remove-set-narrow", []map[string]any{seccompSet("remove", "EACCES", "getcpu")}, nil,
			[]string{"status Seccomp: 2", "syscall unshare ok", "clone-ns user ok", "syscall getcpu EACCES"}},
		// rkt's 2016 whitelist still runs a current Go binary.
		{"retain-set-errno", []map[string]any{seccompSet("retain", "ENOSYS", "@rkt/default-whitelist")}, nil,
			[]string{"status Seccomp: 2", "syscall unshare ENOSYS", "clone-ns user ENOSYS", "syscall io_uring_setup ENOSYS",
				"syscall sysinfo EFAULT", "syscall getcpu ok"}},
		{"retain-all", []map[string]any{seccompSet("retain", "", "@appc.io/all")}, nil, []string{"status Seccomp: 0", "syscall unshare ok"}},
		{"remove-empty-is-default", []map[string]any{seccompSet("remove", "", "@appc.io/empty")}, nil,
			[]string{"status Seccomp: 2", "syscall unshare EPERM"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := isoPod(t, []App{{Name: "a", Exec: seccompProbe}}, Isolators{"a": c.isos}, nil)
			r := runPod(t, p, RunOpts{Args: c.args})
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Stdout.String(), w+"\n") {
					t.Errorf("missing %q in\n%s", w, r.Stdout)
				}
			}
		})
	}
}

// Without an errno a blocked call kills the app with SIGSYS, as rkt's
// did: status 159, recorded as a signal death.
func TestSeccompWithoutErrnoKills(t *testing.T) {
	p := isoPod(t, []App{{Name: "a", Exec: probe("syscall", "getcpu", "+", "exit", "0")}},
		Isolators{"a": {seccompSet("remove", "", "getcpu")}}, nil)
	r := runPod(t, p, RunOpts{})
	if r.Code != 159 || p.Status(t, "a") != 159 {
		t.Fatalf("exit %d, status %d, want 159; stdout %q", r.Code, p.Status(t, "a"), r.Stdout)
	}
	rec, err := status.ReadRecord(p.statusDir(), "a")
	must(t, err)
	if rec.Signal != "SIGSYS" {
		t.Errorf("recorded signal %q", rec.Signal)
	}
}

// The app starts with the open-file limit stage0 gave the stage1,
// although every Go process on the way raised its own, and the filter is
// in before execve. A Go app would raise it again at once, so the app is
// a 40-byte static program (nofileELF) whose exit code is its soft limit
// modulo 256.
func TestAppKeepsStage0Rlimits(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the test program is x86-64 machine code")
	}
	app := App{Name: "a", Exec: []string{"/bin/nofile"}, Rootfs: func(t *testing.T, root string) {
		must(t, os.WriteFile(filepath.Join(root, "bin/nofile"), nofileELF(), 0o755))
	}}
	for _, isos := range [][]map[string]any{nil, {seccompSet("retain", "", "exit_group")}} {
		p := isoPod(t, []App{app}, Isolators{"a": isos}, nil)
		r := runPod(t, p, RunOpts{Wrapper: []string{"prlimit", "--nofile=517:4099"}})
		if r.Code != 517%256 {
			t.Fatalf("isolators %v: the app's soft RLIMIT_NOFILE is %d mod 256, want 517; stderr %s", isos, r.Code, r.Stderr)
		}
	}
}

// nofileELF is a static x86-64 executable that exits with the low byte of
// its soft RLIMIT_NOFILE: prlimit64(0, RLIMIT_NOFILE, NULL, sp);
// exit_group(*sp).
func nofileELF() []byte {
	code := []byte{
		0x48, 0x83, 0xec, 0x10, // sub rsp, 16
		0x31, 0xff, // xor edi, edi
		0xbe, 0x07, 0, 0, 0, // mov esi, RLIMIT_NOFILE
		0x31, 0xd2, // xor edx, edx
		0x49, 0x89, 0xe2, // mov r10, rsp
		0xb8, 0x2e, 0x01, 0, 0, // mov eax, SYS_prlimit64
		0x0f, 0x05, // syscall
		0x8b, 0x3c, 0x24, // mov edi, [rsp]
		0xb8, 0xe7, 0, 0, 0, // mov eax, SYS_exit_group
		0x0f, 0x05, // syscall
	}
	const base, hdrs = 0x400000, 64 + 56
	le := binary.LittleEndian
	b := make([]byte, hdrs, hdrs+len(code))
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 0x3e) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+hdrs) // entry
	le.PutUint64(b[32:], 64)        // program headers
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	ph := b[64:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // R+X
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], uint64(hdrs+len(code)))
	le.PutUint64(ph[40:], uint64(hdrs+len(code)))
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}
