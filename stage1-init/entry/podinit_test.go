package entry

import (
	"errors"
	"os/exec"
	"testing"
)

// A pod that ends while stop checks its PID 1 (its process reaped between
// the pidfd's opening and the reads of /proc) is gone, not an error: stop
// then exits 0, as it does when the pid names no process at all. The
// process here is no pod's PID 1, which the checks would refuse if it
// were still there.
func TestPodInitReapedDuringTheChecksIsGone(t *testing.T) {
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	check := checkPodInit
	defer func() { checkPodInit = check }()
	checkPodInit = func(pid int) error {
		_ = c.Process.Kill()
		_ = c.Wait()
		return check(pid)
	}
	fd, err := openPodInit(c.Process.Pid)
	if !errors.Is(err, errPodGone) {
		t.Fatalf("openPodInit of a process reaped during its checks: fd %d, %v; want errPodGone", fd, err)
	}
	// Alive, the same process is refused: it is no pod's PID 1.
	checkPodInit = check
	d := exec.Command("sleep", "60")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Process.Kill(); _ = d.Wait() }()
	if _, err := openPodInit(d.Process.Pid); err == nil || errors.Is(err, errPodGone) {
		t.Fatalf("openPodInit of a live process that is no pod's PID 1: %v; want a refusal", err)
	}
}
