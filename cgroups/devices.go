package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Device is one entry of an app's device allow-list: a char ('c') or
// block ('b') device, its numbers (-1 for any), and what may be done with
// it: r(ead), w(rite) and m(knod).
type Device struct {
	Type         byte
	Major, Minor int64
	Access       string
}

// AppDevices is the allow-list every app gets: the nodes of the /dev the
// stage1 gives it (null, zero, full, random, urandom, tty, and ptmx and
// the terminals of its own devpts), /dev/console when the pod is
// interactive, and nothing else: no other node can be made or opened,
// whatever the app's capabilities (CAP_MKNOD is in rkt's default set), and
// no block device at all. The terminals may be opened but not made: a
// node of the old ptmx or of a pts made outside the app's devpts would
// reach terminals that are not the app's, and rkt's stage1 refuses it
// too. It is the list of rkt's stage1 and runc less runc's blanket "mknod
// anything" (a node that cannot be opened is of no use, and refusing it
// is clearer).
func AppDevices(interactive bool) []Device {
	ds := []Device{
		{'c', 1, 3, "rwm"}, // null
		{'c', 1, 5, "rwm"}, // zero
		{'c', 1, 7, "rwm"}, // full
		{'c', 1, 8, "rwm"}, // random
		{'c', 1, 9, "rwm"}, // urandom
		{'c', 5, 0, "rwm"}, // tty
		{'c', 5, 2, "rw"},  // ptmx
		{'c', 136, -1, "rw"},
	}
	if interactive {
		ds = append(ds, Device{'c', 5, 1, "rw"}) // console
	}
	return ds
}

func (d Device) v1() string {
	num := func(n int64) string {
		if n < 0 {
			return "*"
		}
		return strconv.FormatInt(n, 10)
	}
	return fmt.Sprintf("%c %s:%s %s", d.Type, num(d.Major), num(d.Minor), d.Access)
}

// SetDevices makes ds the only devices the group's processes may make or
// open: in the v1 devices hierarchy where the host has one, and with a
// BPF_CGROUP_DEVICE program on the group's cgroup v2 directory where there
// is one (both on a hybrid layout; the kernel asks each). It is set
// before the group's first process is moved in. On a unified host the
// program is the only enforcement, so failing to attach it is an error;
// on a hybrid one the v1 controller enforces the list and a kernel that
// refuses the program leaves nothing open.
func (g *Group) SetDevices(ds []Device) error {
	v1 := g.V1["devices"]
	if v1 != "" {
		if err := writeFile(filepath.Join(v1, "devices.deny"), []byte("a")); err != nil {
			return fmt.Errorf("device allow-list: %w", err)
		}
		if err := allowV1(v1, ds); err != nil {
			return err
		}
	}
	if g.V2 == "" {
		if v1 == "" {
			return errors.New("device allow-list: the host mounts neither a devices hierarchy nor cgroup2")
		}
		return nil
	}
	if err := attachDeviceFilter(g.V2, ds); err != nil {
		if v1 != "" && !g.Unified {
			return nil
		}
		return fmt.Errorf("device allow-list: %w", err)
	}
	return nil
}

// allowV1 writes each entry of ds to dir's devices.allow, one write per
// entry (the kernel reads one rule a write) through one open file.
func allowV1(dir string, ds []Device) error {
	p := filepath.Join(dir, "devices.allow")
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("device allow-list: %w", &os.PathError{Op: "open", Path: p, Err: err})
	}
	defer unix.Close(fd)
	for _, d := range ds {
		if err := writeFd(fd, p, []byte(d.v1())); err != nil {
			return fmt.Errorf("device allow-list: allow %s: %w", d.v1(), err)
		}
	}
	return nil
}

// Access bits and device types of struct bpf_cgroup_dev_ctx (uapi
// linux/bpf.h): access_type holds the access in its upper 16 bits and the
// type in its lower ones.
const (
	bpfDevBlock = 1
	bpfDevChar  = 2
	bpfAccMknod = 1
	bpfAccRead  = 2
	bpfAccWrite = 4
)

// insn is one BPF instruction (uapi linux/bpf.h, struct bpf_insn): the
// program is small and fixed in shape, so it is encoded here rather than
// with a BPF library, which PID 1 (it makes the apps' cgroups) would link
// and initialise at every start.
type insn struct {
	code uint8
	regs uint8 // dst in the low nibble, src in the high one
	off  int16
	imm  int32
}

// The instructions the program uses: class | operation | source.
const (
	opLdxMemW  = unix.BPF_LDX | unix.BPF_MEM | unix.BPF_W
	opMov32Reg = unix.BPF_ALU | unix.BPF_MOV | unix.BPF_X
	opAnd32Imm = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	opRsh32Imm = unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K
	opMov64Imm = unix.BPF_ALU64 | unix.BPF_MOV | unix.BPF_K
	opJneImm   = unix.BPF_JMP | unix.BPF_JNE | unix.BPF_K
	opExit     = unix.BPF_JMP | unix.BPF_EXIT
)

func ins(code uint8, dst, src uint8, off int16, imm int32) insn {
	return insn{code: code, regs: dst | src<<4, off: off, imm: imm}
}

// deviceProgram compiles ds into a BPF_PROG_TYPE_CGROUP_DEVICE program:
// it returns 1 (allow) for an access every part of which one entry
// allows, and 0 (deny, EPERM) for anything else.
func deviceProgram(ds []Device) []insn {
	// R1 is the context: u32 access_type, u32 major, u32 minor.
	p := []insn{
		ins(opLdxMemW, 2, 1, 0, 0),
		ins(opMov32Reg, 3, 2, 0, 0),
		ins(opAnd32Imm, 2, 0, 0, 0xffff), // R2: type
		ins(opRsh32Imm, 3, 0, 0, 16),     // R3: access
		ins(opLdxMemW, 4, 1, 4, 0),
		ins(opLdxMemW, 5, 1, 8, 0),
	}
	for _, d := range ds {
		typ := int32(bpfDevChar)
		if d.Type == 'b' {
			typ = bpfDevBlock
		}
		var acc int32
		for _, c := range d.Access {
			acc |= map[rune]int32{'m': bpfAccMknod, 'r': bpfAccRead, 'w': bpfAccWrite}[c]
		}
		// Each test jumps to the next entry when it fails; the
		// offsets are filled in once the entry's length is known.
		var block []insn
		block = append(block, ins(opJneImm, 2, 0, 0, typ))
		if d.Major >= 0 {
			block = append(block, ins(opJneImm, 4, 0, 0, int32(d.Major)))
		}
		if d.Minor >= 0 {
			block = append(block, ins(opJneImm, 5, 0, 0, int32(d.Minor)))
		}
		// Every access asked for must be one the entry gives.
		block = append(block,
			ins(opMov32Reg, 6, 3, 0, 0),
			ins(opAnd32Imm, 6, 0, 0, ^acc&7),
			ins(opJneImm, 6, 0, 0, 0),
			ins(opMov64Imm, 0, 0, 0, 1),
			ins(opExit, 0, 0, 0, 0),
		)
		for i := range block {
			if block[i].code == opJneImm {
				block[i].off = int16(len(block) - i - 1)
			}
		}
		p = append(p, block...)
	}
	return append(p, ins(opMov64Imm, 0, 0, 0, 0), ins(opExit, 0, 0, 0, 0))
}

// bpf is the bpf(2) system call, retried when interrupted and when the
// verifier asks to be tried again (EAGAIN).
func bpf(cmd uintptr, attr unsafe.Pointer, size uintptr) (int, error) {
	for try := 0; ; try++ {
		fd, _, errno := unix.Syscall(unix.SYS_BPF, cmd, uintptr(attr), size)
		if errno == 0 {
			return int(fd), nil
		}
		if errno != unix.EINTR && (errno != unix.EAGAIN || try >= 5) {
			return -1, errno
		}
	}
}

// attachDeviceFilter loads ds's program and attaches it to the cgroup v2
// directory dir with BPF_PROG_ATTACH, which (unlike a BPF link) keeps it
// attached for the cgroup's life once our descriptors are closed.
// BPF_F_ALLOW_MULTI keeps the programs of the cgroups above in force too:
// a device must pass them all, so the pod never gets more than the host's
// own policy (a systemd DevicePolicy=, say) gives its caller.
func attachDeviceFilter(dir string, ds []Device) error {
	pfd, err := loadDeviceFilter(ds)
	if err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	// union bpf_attr for BPF_PROG_ATTACH.
	attach := struct {
		targetFd, attachBpfFd, attachType, attachFlags, replaceBpfFd uint32
	}{
		targetFd:    uint32(fd),
		attachBpfFd: uint32(pfd),
		attachType:  unix.BPF_CGROUP_DEVICE,
		attachFlags: unix.BPF_F_ALLOW_MULTI,
	}
	if _, err := bpf(unix.BPF_PROG_ATTACH, unsafe.Pointer(&attach), unsafe.Sizeof(attach)); err != nil {
		return fmt.Errorf("attach BPF device program to %s: %w", dir, err)
	}
	return nil
}

// loaded holds the device programs loaded so far, by list: loading one
// (the kernel's verifier) costs many times its attaching, and a pod's apps
// mostly share the list (AppDevices), restarts always. The descriptors
// are close-on-exec (bpf(2) makes them so) and kept for the process's
// life; a program attached to a cgroup stays while the cgroup lives,
// whoever holds it.
var loaded struct {
	sync.Mutex
	fds map[string]int
}

// PreloadDeviceFilter loads the program of ds for a later SetDevices, so
// that the verifier runs before the list is needed: PID 1 loads the
// default list while it waits for its pod. A failure is left for
// SetDevices to meet and report.
func PreloadDeviceFilter(ds []Device) { _, _ = loadDeviceFilter(ds) }

// loadDeviceFilter returns the descriptor of ds's loaded program, loading
// it if it is not yet.
func loadDeviceFilter(ds []Device) (int, error) {
	var key strings.Builder
	for _, d := range ds {
		key.WriteString(d.v1())
		key.WriteByte('\n')
	}
	loaded.Lock()
	defer loaded.Unlock()
	if fd, ok := loaded.fds[key.String()]; ok {
		return fd, nil
	}
	prog := deviceProgram(ds)
	license := []byte("Apache-2.0\x00")
	// union bpf_attr for BPF_PROG_LOAD, up to expected_attach_type.
	load := struct {
		progType, insnCnt uint32
		insns, license    uint64
		logLevel, logSize uint32
		logBuf            uint64
		kernVersion       uint32
		progFlags         uint32
		progName          [16]byte
		progIfindex       uint32
		expectedAttach    uint32
	}{
		progType: unix.BPF_PROG_TYPE_CGROUP_DEVICE,
		insnCnt:  uint32(len(prog)),
		insns:    uint64(uintptr(unsafe.Pointer(&prog[0]))),
		license:  uint64(uintptr(unsafe.Pointer(&license[0]))),
	}
	copy(load.progName[:], "pod1_devices")
	pfd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&load), unsafe.Sizeof(load))
	runtime.KeepAlive(prog)
	runtime.KeepAlive(license)
	if err != nil {
		return -1, fmt.Errorf("load BPF device program: %w", err)
	}
	if loaded.fds == nil {
		loaded.fds = map[string]int{}
	}
	loaded.fds[key.String()] = pfd
	return pfd, nil
}
