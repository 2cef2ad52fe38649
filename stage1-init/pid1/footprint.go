package pid1

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/starttricks"
)

// shedDelay is how long after the pod is up the first shedding runs.
const shedDelay = 100 * time.Millisecond

// shedUnusedMemory gives back, once the pod is set up, the memory that
// only start-up used: the heap garbage of parsing and setup, and the pages
// of the stage1 binary that were mapped in to run that code. The binary's
// read-only mappings (code and constants) are dropped from this process's
// page tables with MADV_DONTNEED; the pages stay in the page cache, shared
// with every other pod running the same binary, and the few the waiting
// and supervising code uses fault straight back in. Without this each of
// the two long-lived stage1 processes keeps its binary's read-only pages
// mapped for the pod's whole life (docs/benchmarks.md: memory).
//
// Once the pod is up it runs shedDelay later, not at once: it is a
// garbage collection and a walk of the mappings, and a short-lived pod
// ends before it (it would only compete with the apps' start for the CPU).
// PID 1 runs it from its event loop (pid1.loop).
//
// Only mappings of our own executable with no write permission are
// touched: on a writable private mapping (the binary's data) MADV_DONTNEED
// would throw modified pages away.
func shedUnusedMemory() {
	if !starttricks.On(starttricks.Shed) {
		return
	}
	spans := ownReadOnlyMappings()
	debug.FreeOSMemory()
	// Nothing may run between the madvise calls and the return but this
	// loop: whatever code or constants run after them are faulted back
	// in, 64 KiB around each page touched (the kernel's fault-around).
	// So the maps file is read and closed before (an *os.File's close
	// and finalizer are pages of their own), and the caller is the
	// process's own loop, not a goroutine that ends afterwards (a
	// goroutine's end looks its function up in the binary's tables).
	for _, s := range spans {
		// The syscall package's, which the loop uses anyway; x/sys/unix's
		// would be one more page range back in.
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_DONTNEED)
	}
}

// restoreCode maps the binary's read-only pages back in, all at once
// (MADV_POPULATE_READ, Linux 5.14; on older kernels it does nothing),
// when a stop begins in a pod that shed them. The end of a pod runs code
// the waiting loop never did (the apps' ends, their records and statuses,
// the log streams' close): without this each 64 KiB of it faults back in
// on its own, a trap each in a virtual machine, on the path from the last
// app's exit to the lock's release. A stop request comes before the apps
// exit, so this runs while they end.
func restoreCode() {
	if !starttricks.On(starttricks.Shed) {
		return
	}
	for _, s := range ownReadOnlyMappings() {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_POPULATE_READ)
	}
}

// span is an address range.
type span struct{ start, end uintptr }

// ownReadOnlyMappings lists the mappings of our own executable with no
// write permission.
func ownReadOnlyMappings() []span {
	var exe unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &exe); err != nil {
		return nil
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	var spans []span
	for _, l := range strings.Split(string(b), "\n") {
		// start-end perms offset major:minor inode path
		fields := strings.Fields(l)
		if len(fields) < 6 || strings.Contains(fields[1], "w") || fields[1][3] != 'p' {
			continue
		}
		if ino, err := strconv.ParseUint(fields[4], 10, 64); err != nil || ino != exe.Ino || !sameDev(fields[3], exe.Dev) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if ok && err1 == nil && err2 == nil {
			spans = append(spans, span{uintptr(start), uintptr(end)})
		}
	}
	return spans
}

// sameDev compares /proc/self/maps' "major:minor" (hex) with a stat's dev.
func sameDev(field string, dev uint64) bool {
	ma, mi, ok := strings.Cut(field, ":")
	major, err1 := strconv.ParseUint(ma, 16, 32)
	minor, err2 := strconv.ParseUint(mi, 16, 32)
	return ok && err1 == nil && err2 == nil && uint64(unix.Major(dev)) == major && uint64(unix.Minor(dev)) == minor
}
