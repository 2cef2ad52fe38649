package selfexe

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// execFdChildEnv makes the test binary, started by the tests below
// through the path readOnlySelf gave, say it ran and exit.
const execFdChildEnv = "POD1_EXECFD_CHILD"

func init() {
	if os.Getenv(execFdChildEnv) == "1" {
		_, _ = os.Stdout.WriteString("ran through the read-only copy\n")
		os.Exit(0)
	}
}

// The binary a child executes through /proc/self/fd/<n> is kept below 64
// when the child's files leave room: above that, the Go program (several
// threads) grows its descriptor table, which waits for an RCU grace
// period on every pod's start (5-15 ms on the bench's VM). And the
// child's shuffle of its files before execve never lands on it, however
// the files are numbered: the child still runs the binary.
func TestReadOnlySelfExecutesBelowTheGrownTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("open_tree of our binary needs root")
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	// Descriptors at chosen numbers, as run's pipes and pidfds are.
	at := func(n int) uintptr {
		t.Helper()
		fd, err := unix.FcntlInt(devNull.Fd(), unix.F_DUPFD_CLOEXEC, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return uintptr(fd)
	}
	closed := ^uintptr(0)
	for _, tc := range []struct {
		name  string
		extra []uintptr
		below bool // the binary's descriptor must be below 64
	}{
		// As PID 1's and the keeper's files are: ten or so, low numbers.
		{name: "low files", extra: []uintptr{at(3), closed, at(9), at(12), closed, at(20)}, below: true},
		// The child's shuffle reaches from above the highest file to
		// about ten past it.
		{name: "files up to 40", extra: []uintptr{at(40), at(5), at(6), closed, at(7), at(8)}, below: true},
		// No room below 64: correct, if slower.
		{name: "files up to 60", extra: []uintptr{at(60), at(30), at(31), at(32), at(33), at(34)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			files := append([]uintptr{devNull.Fd(), w.Fd(), os.Stderr.Fd()}, tc.extra...)
			exe, path, err := readOnlySelf(files)
			if err != nil {
				w.Close()
				t.Fatal(err)
			}
			defer exe.Close()
			n := int(exe.Fd())
			if path != "/proc/self/fd/"+itoa(n) {
				t.Errorf("path %q for descriptor %d", path, n)
			}
			if tc.below && n >= 64 {
				t.Errorf("the binary is on descriptor %d: 64 or more grows the descriptor table", n)
			}
			// syscall.ForkExec's child moves its files through the
			// numbers from one above the highest file (or len(files))
			// on: one for its error pipe, one for each file at most.
			top := len(files)
			for _, f := range files {
				top = max(top, int(f))
			}
			top += 1 + len(files) + 1
			if n <= top {
				t.Errorf("the binary is on descriptor %d, within the child's shuffle of its files (up to %d)", n, top)
			}
			pid, err := syscall.ForkExec(path, []string{"execfd-child"}, &syscall.ProcAttr{
				Env:   []string{execFdChildEnv + "=1"},
				Files: files,
			})
			w.Close()
			if err != nil {
				t.Fatalf("exec through %s: %v", path, err)
			}
			done := make(chan string, 1)
			go func() {
				b := make([]byte, 256)
				k, _ := r.Read(b)
				done <- string(b[:k])
			}()
			var out string
			select {
			case out = <-done:
			case <-time.After(30 * time.Second):
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
				t.Fatal(err)
			}
			if !ws.Exited() || ws.ExitStatus() != 0 || !strings.Contains(out, "ran through the read-only copy") {
				t.Fatalf("the child through %s: %v, output %q", path, ws, out)
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// readOnlySelf returns the test binary as a detached, read-only mount of
// that one file, as ReadOnlySibling does a binary next to it, and the path
// that executes it while the file is open, in a child that
// syscall.ForkExec starts with files (execFd).
func readOnlySelf(files []uintptr) (*os.File, string, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/proc/self/exe", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, "", fmt.Errorf("read-only test binary: open_tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("read-only test binary: mount_setattr: %w", err)
	}
	high, err := ExecFd(fd, files)
	unix.Close(fd)
	if err != nil {
		return nil, "", fmt.Errorf("read-only test binary: %w", err)
	}
	return os.NewFile(uintptr(high), "test-binary"), "/proc/self/fd/" + strconv.Itoa(high), nil
}
