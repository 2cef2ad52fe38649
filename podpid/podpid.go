// Package podpid owns the pod directory's pid file (layout.Pid), where the
// run entry point names the pod's PID 1 to the host, and the ppid file
// other stage1s write instead (layout.Ppid, a process whose only child is
// PID 1). Every reader of either, in the stage1's host-side entry points
// and in the host tools, goes through here.
//
// The pod directory is writable by whoever could reach it from the pod,
// so the file is hostile input: it is opened without following a symlink
// and without blocking on a FIFO, read up to MaxSize bytes, and parsed
// strictly. The process it names is trusted to be the pod's PID 1 only
// once Open or Verify has checked what only that process has (see
// Verify); a caller that signals, enters or talks to it must use those.
// Read alone is for showing the pid of a pod that has ended.
package podpid

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// MaxSize bounds what is read of a pid or ppid file: a pid's digits and a
// newline fit many times over.
const MaxSize = 64

// maxPid is the kernel's PID_MAX_LIMIT: no process has a higher pid.
const maxPid = 1 << 22

var (
	// ErrGone means the pid names no process: the pod has ended.
	ErrGone = errors.New("no such process")
	// ErrNoChild means the ppid file names a process that has not
	// started the pod's PID 1 yet.
	ErrNoChild = errors.New("no child yet")
)

// Format is the pid file's content for pid.
func Format(pid int) []byte { return []byte(strconv.Itoa(pid) + "\n") }

// Write writes the pid file in podDir, atomically and without following
// a planted symlink. Its mtime is started, when the pod's start began:
// rkt list and rkt status show it as the pod's start (contract §4), and
// the file itself is written only once PID 1 is ready, which is later by
// the whole start (the networks' set-up included).
func Write(podDir string, pid int, started time.Time) error {
	d, err := safefile.OpenDir(podDir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteFileTimed(layout.Pid, Format(pid), 0o644, safefile.Volatile, started)
}

// Parse reads a pid file's content: decimal digits without a sign or a
// leading zero, and at most one newline after them, naming a pid above 1
// (pid 1 of the caller's namespace is never a pod's).
func Parse(b []byte) (int, error) {
	s := strings.TrimSuffix(string(b), "\n")
	ok := s != "" && len(s) <= 7 && s[0] != '0'
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] >= '0' && s[i] <= '9'
	}
	n := 0
	if ok {
		n, _ = strconv.Atoi(s)
	}
	if !ok || n <= 1 || n > maxPid {
		return 0, fmt.Errorf("holds %q, not a pid", b)
	}
	return n, nil
}

// readAt reads and parses the file name in the directory dirfd.
func readAt(dirfd int, name string) (int, error) {
	b, err := safefile.ReadRegularAt(dirfd, name, MaxSize)
	switch {
	case errors.Is(err, safefile.ErrNotRegular), errors.Is(err, safefile.ErrTooLarge):
		return 0, fmt.Errorf("%s: %w", name, err)
	case err != nil:
		return 0, err
	}
	n, err := Parse(b)
	if err != nil {
		return 0, fmt.Errorf("%s %w", name, err)
	}
	return n, nil
}

// ReadAt reads the pid file of the pod directory dirfd or, when there is
// none, the ppid file: the pid either names, unverified. An error wraps
// os.ErrNotExist when neither exists.
func ReadAt(dirfd int) (int, error) {
	n, err := readAt(dirfd, layout.Pid)
	if errors.Is(err, os.ErrNotExist) {
		return readAt(dirfd, layout.Ppid)
	}
	return n, err
}

// pid1At is the pid of the pod's PID 1 as the pod directory names it:
// the pid file's, or the only child of the ppid file's process.
func pid1At(dirfd int) (int, error) {
	n, err := readAt(dirfd, layout.Pid)
	if !errors.Is(err, os.ErrNotExist) {
		return n, err
	}
	ppid, err := readAt(dirfd, layout.Ppid)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ppid, ppid))
	if err != nil {
		return 0, fmt.Errorf("ppid %d: %w", ppid, ErrNoChild)
	}
	f := strings.Fields(string(b))
	switch len(f) {
	case 0:
		return 0, fmt.Errorf("ppid %d: %w", ppid, ErrNoChild)
	case 1:
		n, err := Parse([]byte(f[0]))
		if err != nil {
			return 0, fmt.Errorf("ppid %d's child %w", ppid, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("ppid %d has %d children, want one", ppid, len(f))
}

// PID1 is the pod's PID 1, checked and pinned by a pidfd: while it is
// open, the pid cannot name another process unnoticed.
type PID1 struct {
	Pid int
	fd  int
}

// Fd is the pidfd, valid until Close.
func (p *PID1) Fd() int { return p.fd }

// Close releases the pidfd.
func (p *PID1) Close() { unix.Close(p.fd) }

// Signal sends sig to PID 1 through the pidfd; ErrGone if it has exited.
func (p *PID1) Signal(sig unix.Signal) error {
	err := unix.PidfdSendSignal(p.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return ErrGone
	}
	return err
}

// Open reads the pid (or ppid) file of podDir and returns the process it
// names once Verify has checked it. ErrGone: it names no process.
func Open(podDir string) (*PID1, error) {
	dfd, err := unix.Open(podDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: podDir, Err: err}
	}
	defer unix.Close(dfd)
	return OpenAt(dfd)
}

// OpenAt is Open for the pod directory open as dirfd.
func OpenAt(dirfd int) (*PID1, error) {
	pid, err := pid1At(dirfd)
	if err != nil {
		return nil, err
	}
	return verifyAt(dirfd, pid)
}

// Verify checks that pid, however the caller learnt it (enter's --pid,
// which rkt read from the pid file), is the PID 1 of the pod whose
// directory is podDir, and pins it.
//
// What is checked is what only the pod's PID 1 has: it is the init of a
// pid namespace below ours (NSpid ends in 1), and it or its parent (the
// run entry point, which started it) holds the exclusive flock on this
// pod directory through one of its own fds (fdinfo shows the lock). An
// app cannot forge that: it lives in the pod's pid namespace, so any
// process it makes, nested namespace inits included, has a parent inside
// the pod, and nothing inside the pod can open the pod directory, which
// is outside every app's root, or inherit the lock's fd (close-on-exec).
// The checks read /proc while the pidfd pins the process; a final signal
// 0 through the pidfd proves that what was read was that process and not
// a successor with a reused pid.
func Verify(podDir string, pid int) (*PID1, error) {
	dfd, err := unix.Open(podDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: podDir, Err: err}
	}
	defer unix.Close(dfd)
	return verifyAt(dfd, pid)
}

func verifyAt(dirfd, pid int) (*PID1, error) {
	if pid <= 1 {
		return nil, fmt.Errorf("pid %d is not a pod's PID 1", pid)
	}
	var pod unix.Stat_t
	if err := unix.Fstat(dirfd, &pod); err != nil {
		return nil, fmt.Errorf("pod directory: %w", err)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	p := &PID1{Pid: pid, fd: fd}
	if err := checkPID1(pid, pod.Dev, pod.Ino); err != nil {
		// The pod's own end races the caller (an app's failure stops
		// the pod while rkt stop asks the same): a process reaped
		// between the pidfd's opening and the reads of /proc has
		// nothing left to act on, whatever it was.
		gone := errors.Is(p.Signal(0), ErrGone)
		p.Close()
		if gone {
			return nil, ErrGone
		}
		return nil, err
	}
	if err := p.Signal(0); err != nil {
		p.Close()
		if errors.Is(err, ErrGone) {
			return nil, ErrGone
		}
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return p, nil
}

// checkPID1 is a variable for the test that makes the pod end while the
// checks read /proc.
var checkPID1 = checkPID1Proc

func checkPID1Proc(pid int, dev, ino uint64) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	var nspid []string
	ppid := 0
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		switch k {
		case "NSpid":
			nspid = strings.Fields(v)
		case "PPid":
			ppid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if len(nspid) < 2 || nspid[len(nspid)-1] != "1" {
		return fmt.Errorf("pid %d is not the PID 1 of a pod (not the init of a pid namespace)", pid)
	}
	if !holdsLock(pid, dev, ino) && (ppid <= 0 || !holdsLock(ppid, dev, ino)) {
		return fmt.Errorf("pid %d is not this pod's PID 1 (neither it nor its parent %d holds the pod's lock)", pid, ppid)
	}
	return nil
}

// holdsLock reports whether pid holds the exclusive flock on the
// directory dev:ino through one of its fds.
func holdsLock(pid int, dev, ino uint64) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	ents, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return false
	}
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(dir+"/fd/"+e.Name(), &st) != nil || st.Dev != dev || st.Ino != ino {
			continue
		}
		info, err := os.ReadFile(dir + "/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			if f := strings.Fields(l); len(f) >= 5 && f[0] == "lock:" && f[2] == "FLOCK" && f[4] == "WRITE" {
				return true
			}
		}
	}
	return false
}
