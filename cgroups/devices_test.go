package cgroups

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// deviceScript tries, in the directory given as $1, to make nodes the
// allow-list refuses and allows, and to open for reading and writing nodes
// the test made beforehand; it prints one word for each that worked.
const deviceScript = `D=$1
mknod $D/blk b 7 0 && echo OK:mknod-blk
mknod $D/mem c 1 1 && echo OK:mknod-mem
mknod $D/misc c 10 232 && echo OK:mknod-misc
mknod $D/null2 c 1 3 && echo OK:mknod-null
(exec 3<>$D/pre-loop) && echo OK:open-blk
(exec 3<>$D/pre-kmsg) && echo OK:open-kmsg
(exec 3<>$D/pre-null) && echo OK:open-null
exit 0
`

// The BPF program alone (the test's v1 devices cgroup allows everything)
// keeps a root process with every capability from making or opening any
// node off the list, and lets it use those on it. The same script outside
// the cgroup does everything (negative control), so the refusals are the
// program's.
func TestDeviceFilterBPF(t *testing.T) {
	dir := scratchUnified(t, "devices", "it makes a cgroup and attaches a BPF device program to it")
	must(t, attachDeviceFilter(dir, AppDevices(false)))

	run := func(inCgroup bool) string {
		nodes := t.TempDir()
		for name, dev := range map[string]struct {
			mode         uint32
			major, minor uint32
		}{
			"pre-loop": {unix.S_IFBLK, 7, 0}, "pre-kmsg": {unix.S_IFCHR, 1, 11}, "pre-null": {unix.S_IFCHR, 1, 3},
		} {
			must(t, unix.Mknod(filepath.Join(nodes, name), dev.mode|0o600, int(unix.Mkdev(dev.major, dev.minor))))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", deviceScript, "sh", nodes)
		if inCgroup {
			cg, err := os.Open(dir)
			must(t, err)
			defer cg.Close()
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("script: %v: %s", err, out)
		}
		return oks(out)
	}
	if got, want := run(false), "mknod-blk mknod-mem mknod-misc mknod-null open-blk open-kmsg open-null"; got != want {
		t.Fatalf("outside the cgroup: %q, want %q", got, want)
	}
	if got, want := run(true), "mknod-null open-null"; got != want {
		t.Fatalf("in the filtered cgroup: %q, want %q", got, want)
	}
}

// Each entry allows exactly its accesses: read-only null refuses a write
// and a mknod, and a wildcard minor matches any.
func TestDeviceProgramAccessBits(t *testing.T) {
	dir := scratchUnified(t, "devbits", "it makes a cgroup and attaches a BPF device program to it")
	must(t, attachDeviceFilter(dir, []Device{{'c', 1, 3, "r"}, {'c', 1, -1, "m"}}))
	nodes := t.TempDir()
	must(t, unix.Mknod(filepath.Join(nodes, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	script := `cat $1/null && echo OK:read-null
(exec 3>$1/null) && echo OK:write-null
mknod $1/zero c 1 5 && echo OK:mknod-zero
mknod $1/blk b 1 5 && echo OK:mknod-blk
exit 0`
	cg, err := os.Open(dir)
	must(t, err)
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script, "sh", nodes)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.CombinedOutput()
	if got, want := oks(out), "read-null mknod-zero"; err != nil || got != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
}

// oks picks the words a script printed as OK:word.
func oks(out []byte) string {
	var ws []string
	for _, l := range strings.Split(string(out), "\n") {
		if w, ok := strings.CutPrefix(l, "OK:"); ok {
			ws = append(ws, w)
		}
	}
	return strings.Join(ws, " ")
}

// The program of a list is loaded once (PreloadDeviceFilter, or the first
// SetDevices) and that one program is attached to every cgroup given the
// list; another list gets a program of its own.
func TestDeviceFilterLoadedOnce(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it makes a cgroup and attaches a BPF device program to it")
	}
	v2, _, err := mounts()
	if err != nil || v2 == "" {
		t.Skip("no cgroup2 mount")
	}
	PreloadDeviceFilter(AppDevices(false))
	pfd, err := loadDeviceFilter(AppDevices(false))
	must(t, err)
	want := progID(t, pfd)
	var ids []uint32
	for i, ds := range [][]Device{AppDevices(false), AppDevices(false), AppDevices(true)} {
		dir := filepath.Join(v2, "pod1-test-devonce-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(i))
		must(t, os.Mkdir(dir, 0o755))
		defer func() { _ = unix.Rmdir(dir) }()
		must(t, (&Group{V2: dir, Unified: true}).SetDevices(ds))
		ids = append(ids, attachedDeviceProg(t, dir))
	}
	if ids[0] != want || ids[1] != want || ids[2] == want || ids[2] == 0 {
		t.Fatalf("attached programs %v; the preloaded one is %d", ids, want)
	}
}

// progID is the kernel's id of the program behind fd (BPF_OBJ_GET_INFO_BY_FD).
func progID(t *testing.T, fd int) uint32 {
	t.Helper()
	info := &bpfOut // struct bpf_prog_info's start: u32 type, u32 id, ...
	attr := struct {
		bpfFd, infoLen uint32
		info           uint64
	}{uint32(fd), uint32(len(info)), uint64(uintptr(unsafe.Pointer(&info[0])))}
	if _, err := bpf(unix.BPF_OBJ_GET_INFO_BY_FD, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err != nil {
		t.Fatal(err)
	}
	return *(*uint32)(unsafe.Pointer(&info[4]))
}

// bpfOut is where the kernel writes what the tests ask of it: not on a
// goroutine stack, which may move while the kernel holds its address as a
// number.
var bpfOut [64]byte

// attachedDeviceProg is the id of the one device program attached to dir
// itself (BPF_PROG_QUERY).
func attachedDeviceProg(t *testing.T, dir string) uint32 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	ids := (*[4]uint32)(unsafe.Pointer(&bpfOut))
	attr := struct {
		targetFd, attachType, queryFlags, attachFlags uint32
		progIDs                                       uint64
		progCnt                                       uint32
		_                                             uint32
	}{targetFd: uint32(fd), attachType: unix.BPF_CGROUP_DEVICE, progIDs: uint64(uintptr(unsafe.Pointer(&ids[0]))), progCnt: uint32(len(ids))}
	if _, err := bpf(unix.BPF_PROG_QUERY, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err != nil {
		t.Fatal(err)
	}
	if attr.progCnt != 1 {
		t.Fatalf("%s: %d device programs attached", dir, attr.progCnt)
	}
	return ids[0]
}
