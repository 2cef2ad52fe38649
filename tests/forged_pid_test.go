package tests

import (
	"fmt"
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

// forgePid writes pid into the pod's pid file and returns what restores
// the real one.
func forgePid(t *testing.T, podDir string, pid int) (restore func()) {
	t.Helper()
	f := filepath.Join(podDir, layout.Pid)
	real, err := os.ReadFile(f)
	must(t, err)
	must(t, os.WriteFile(f, []byte(strconv.Itoa(pid)+"\n"), 0o644))
	return func() { must(t, os.WriteFile(f, real, 0o644)) }
}

// A pid file the pod could have rewritten names a host process: every
// host tool that reads it (status, stop, enter) refuses or ignores it,
// and none signals or enters that process. pod1 status used to show the
// forged pid as the pod's.
func TestForgedPidFileIsIgnoredByTheHostTools(t *testing.T) {
	data := dataDir(t)
	p := runBG(t, data, probeACIDir(t), "--name=a", "--exec=/bin/probe", "--", "sleep", "1h")
	pid1 := p.waitPid(t)

	host := exec.Command("sleep", "60")
	must(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	hostPid := host.Process.Pid
	restore := forgePid(t, p.Dir, hostPid)

	out, errOut, code := pod1(t, data, "status", p.UUID)
	if code != 0 {
		t.Errorf("pod1 status with a forged pid file: %d %s", code, errOut)
	}
	if strings.Contains(out, "pid="+strconv.Itoa(hostPid)) {
		t.Errorf("pod1 status shows the forged pid %d as the pod's:\n%s", hostPid, out)
	}
	_, errOut, code = pod1(t, data, "stop", p.UUID)
	if code == 0 || !strings.Contains(errOut, p.UUID) {
		t.Errorf("pod1 stop with a forged pid file: %d %q, want a refusal naming the pod", code, errOut)
	}
	_, errOut, code = pod1(t, data, "stop", "--force", p.UUID)
	if code == 0 {
		t.Errorf("pod1 stop --force with a forged pid file: %d %q, want a refusal", code, errOut)
	}
	out, errOut, code = pod1(t, data, "enter", p.UUID, "/bin/probe", "pid")
	if code == 0 || out != "" {
		t.Errorf("pod1 enter with a forged pid file: %d %q %q, want a refusal", code, out, errOut)
	}
	if signalled(hostPid, unix.SIGTERM) || signalled(hostPid, unix.SIGUSR1) {
		t.Errorf("a host tool signalled the process the forged pid file names")
	}
	if ns := pidNS(hostPid); ns != pidNS(os.Getpid()) {
		t.Errorf("the host process moved to pid namespace %s", ns)
	}

	restore()
	out, _, _ = pod1(t, data, "status", p.UUID)
	if !strings.Contains(out, "pid="+strconv.Itoa(pid1)+"\n") {
		t.Errorf("pod1 status with the real pid file: no pid=%d:\n%s", pid1, out)
	}
	if _, errOut, code := pod1(t, data, "stop", p.UUID); code != 0 {
		t.Fatalf("pod1 stop with the real pid file: %d %s", code, errOut)
	}
	p.wait(t)
}

// nsInitWithMount starts the init of a pid namespace with a mount
// namespace of its own, in which a tmpfs covers dir, and returns its pid.
func nsInitWithMount(t *testing.T, dir string) int {
	t.Helper()
	c := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation=private",
		"sh", "-c", "mount -t tmpfs tmpfs \"$1\" && exec sleep 60", "sh", dir)
	must(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	var nsInit int
	waitFor(t, 10*time.Second, "unshare's child", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.Process.Pid, c.Process.Pid))
		f := strings.Fields(string(b))
		if len(f) != 1 {
			return false
		}
		nsInit, _ = strconv.Atoi(f[0])
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", nsInit))
		return strings.HasSuffix(exe, "/sleep")
	})
	t.Cleanup(func() { _ = unix.Kill(nsInit, unix.SIGKILL) })
	return nsInit
}

// The app/add entry point attaches an added app's volume sources in the
// root of the process the pid file names. Named there, the init of
// another pid namespace (of any mount namespace) must be refused before
// anything is attached to its root: it used to pass for the pod's PID 1
// (it is the init of a pid namespace), and got the source mounted in.
func TestForgedPidFileAppAddAttachesNothing(t *testing.T) {
	cover := t.TempDir()
	src := filepath.Join(cover, "src")
	must(t, os.Mkdir(src, 0o755))
	data, uuid := cliSandbox(t, "--volume=v,kind=host,source="+src)
	podDir := filepath.Join(data, "pods/run", uuid)
	nsInit := nsInitWithMount(t, cover)
	restore := forgePid(t, podDir, nsInit)

	code, out := pod1cli(t, nil, "--dir="+data, "app", "add", uuid, probeACIDir(t), "--name=b",
		"--mount", "volume=v,target=/v", "--exec=/bin/probe", "--", "sleep", "1h")
	if code == 0 {
		t.Errorf("app add with a forged pid file: exit 0, want a refusal: %s", out)
	}
	if _, err := os.Lstat(fmt.Sprintf("/proc/%d/root%s", nsInit, src)); err == nil {
		t.Errorf("app add attached the volume source in the root of the process the forged pid file names: %s", out)
	}
	restore()
}
