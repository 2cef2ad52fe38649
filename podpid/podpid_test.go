package podpid

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

func TestParseIsStrict(t *testing.T) {
	for _, ok := range []string{"2\n", "42", "4194304\n"} {
		if _, err := Parse([]byte(ok)); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "\n", "0\n", "1\n", "-5\n", "+5\n", "042\n", " 42\n", "42 \n", "42\n\n",
		"4194305\n", "99999999\n", "0x10\n", "42\x00", "4 2\n"} {
		if n, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", bad, n)
		}
	}
	if n, err := Parse(Format(1234)); n != 1234 || err != nil {
		t.Errorf("Parse(Format(1234)) = %d, %v", n, err)
	}
}

// The pid and ppid files are read without following a symlink, without
// blocking on a FIFO, and within MaxSize.
func TestReadRefusesWhatIsNotAPidFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, layout.Pid)
	read := func() error {
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		_, err = ReadAt(int(d.Fd()))
		return err
	}
	if err := read(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no pid file: %v, want ErrNotExist", err)
	}
	other := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(other, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, f); err != nil {
		t.Fatal(err)
	}
	if err := read(); err == nil {
		t.Error("a symlinked pid file was read")
	}
	must(t, os.Remove(f))
	if err := unix.Mkfifo(f, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := read(); err == nil || !strings.Contains(err.Error(), "pid: not a regular file") {
		t.Errorf("a FIFO pid file: %v", err)
	}
	must(t, os.Remove(f))
	if err := os.WriteFile(f, []byte(strings.Repeat("1", MaxSize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := read(); err == nil {
		t.Error("an oversized pid file was read")
	}
	must(t, os.Remove(f))
	if err := os.WriteFile(filepath.Join(dir, layout.Ppid), []byte("77\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, _ := os.Open(dir)
	defer d.Close()
	if n, err := ReadAt(int(d.Fd())); n != 77 || err != nil {
		t.Errorf("ppid file alone: %d %v, want 77", n, err)
	}
}

func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c
}

// A process that is no pod's PID 1 is refused, whether the pid file or
// the caller names it; a pid that names no process is ErrGone.
func TestOpenRefusesAProcessThatIsNotThePodsPID1(t *testing.T) {
	dir := t.TempDir()
	c := sleeper(t)
	if err := Write(dir, c.Process.Pid, time.Now()); err != nil {
		t.Fatal(err)
	}
	if p, err := Open(dir); err == nil || errors.Is(err, ErrGone) {
		t.Errorf("Open of a pid file naming a plain process: %v, %v; want a refusal", p, err)
	}
	if p, err := Verify(dir, os.Getpid()); err == nil || errors.Is(err, ErrGone) {
		t.Errorf("Verify of the caller: %v, %v; want a refusal", p, err)
	}
	d := exec.Command("true")
	if err := d.Run(); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, d.Process.Pid, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The pid may have been reused meanwhile: then it is refused.
	if _, err := Open(dir); err == nil {
		t.Errorf("Open of an exited process's pid: nil error")
	}
	// A ppid file whose process has no child yet.
	must(t, os.Remove(filepath.Join(dir, layout.Pid)))
	if err := os.WriteFile(filepath.Join(dir, layout.Ppid), []byte(strconv.Itoa(c.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrNoChild) {
		t.Errorf("Open through a ppid without a child: %v, want ErrNoChild", err)
	}
}

// A pod that ends while its PID 1 is checked (its process reaped between
// the pidfd's opening and the reads of /proc) is gone, not an error: stop
// then exits 0, as it does when the pid names no process at all.
func TestReapedDuringTheChecksIsGone(t *testing.T) {
	dir := t.TempDir()
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	check := checkPID1
	defer func() { checkPID1 = check }()
	checkPID1 = func(pid int, dev, ino uint64) error {
		_ = c.Process.Kill()
		_ = c.Wait()
		return check(pid, dev, ino)
	}
	if p, err := Verify(dir, c.Process.Pid); !errors.Is(err, ErrGone) {
		t.Fatalf("Verify of a process reaped during its checks: %v, %v; want ErrGone", p, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The pid file's mtime is the pod's start that Write is given (rkt list
// and rkt status show it), to the nanosecond, also where a file was there
// before; its content is the pid.
func TestWriteGivesThePidFileTheStart(t *testing.T) {
	dir := t.TempDir()
	started := time.Now().Add(-90 * time.Minute).Add(123456789 * time.Nanosecond)
	must(t, os.WriteFile(filepath.Join(dir, layout.Pid), []byte("7\n"), 0o644))
	if err := Write(dir, 4242, started); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, layout.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(started) {
		t.Errorf("pid file mtime %v, want the start %v", fi.ModTime(), started)
	}
	b, err := os.ReadFile(filepath.Join(dir, layout.Pid))
	if err != nil || string(b) != "4242\n" {
		t.Errorf("pid file: %q, %v; want \"4242\\n\"", b, err)
	}
}
