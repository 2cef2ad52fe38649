package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
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
		if err := os.WriteFile(filepath.Join(v1, "devices.deny"), []byte("a"), 0); err != nil {
			return fmt.Errorf("device allow-list: %w", err)
		}
		for _, d := range ds {
			if err := os.WriteFile(filepath.Join(v1, "devices.allow"), []byte(d.v1()), 0); err != nil {
				return fmt.Errorf("device allow-list: allow %s: %w", d.v1(), err)
			}
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

// deviceProgram compiles ds into a BPF_PROG_TYPE_CGROUP_DEVICE program:
// it returns 1 (allow) for an access every part of which one entry
// allows, and 0 (deny, EPERM) for anything else.
func deviceProgram(ds []Device) asm.Instructions {
	// R1 is the context: u32 access_type, u32 major, u32 minor.
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.Mov.Reg32(asm.R3, asm.R2),
		asm.And.Imm32(asm.R2, 0xffff), // R2: type
		asm.RSh.Imm32(asm.R3, 16),     // R3: access
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
	label := func(i int) string { return "entry" + strconv.Itoa(i) }
	for i, d := range ds {
		next := label(i + 1)
		typ := int32(bpfDevChar)
		if d.Type == 'b' {
			typ = bpfDevBlock
		}
		var acc int32
		for _, c := range d.Access {
			acc |= map[rune]int32{'m': bpfAccMknod, 'r': bpfAccRead, 'w': bpfAccWrite}[c]
		}
		block := asm.Instructions{asm.JNE.Imm(asm.R2, typ, next)}
		if d.Major >= 0 {
			block = append(block, asm.JNE.Imm(asm.R4, int32(d.Major), next))
		}
		if d.Minor >= 0 {
			block = append(block, asm.JNE.Imm(asm.R5, int32(d.Minor), next))
		}
		// Every access asked for must be one the entry gives.
		block = append(block,
			asm.Mov.Reg32(asm.R6, asm.R3),
			asm.And.Imm32(asm.R6, ^acc&7),
			asm.JNE.Imm(asm.R6, 0, next),
			asm.Mov.Imm(asm.R0, 1),
			asm.Return(),
		)
		block[0] = block[0].WithSymbol(label(i))
		insns = append(insns, block...)
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol(label(len(ds))),
		asm.Return(),
	)
}

// attachDeviceFilter loads ds's program and attaches it to the cgroup v2
// directory dir with BPF_PROG_ATTACH, which (unlike a BPF link) keeps it
// attached for the cgroup's life once our descriptors are closed.
// BPF_F_ALLOW_MULTI keeps the programs of the cgroups above in force too:
// a device must pass them all, so the pod never gets more than the host's
// own policy (a systemd DevicePolicy=, say) gives its caller.
func attachDeviceFilter(dir string, ds []Device) error {
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Type:         ebpf.CGroupDevice,
		Instructions: deviceProgram(ds),
		License:      "Apache-2.0",
	}, ebpf.ProgramOptions{LogDisabled: true})
	if err != nil {
		return fmt.Errorf("load BPF device program: %w", err)
	}
	defer func() { _ = prog.Close() }()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target:  fd,
		Program: prog,
		Attach:  ebpf.AttachCGroupDevice,
		Flags:   unix.BPF_F_ALLOW_MULTI,
	}); err != nil {
		return fmt.Errorf("attach BPF device program to %s: %w", dir, err)
	}
	return nil
}
