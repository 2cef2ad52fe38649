package control

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// pair is a connected pair of Unix stream sockets: a client's end and
// PID 1's.
func pair(t *testing.T) (client, server *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// check runs the part of Authenticate after SO_PEERCRED (which refuses a
// peer of the test's own process) on what send sent.
func check(t *testing.T, host NamespaceID, send func(c *net.UnixConn)) error {
	t.Helper()
	c, s := pair(t)
	send(c)
	fd, err := readHello(s)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return NewPeers(host).isHost(fd)
}

func sendWith(b byte, files ...*os.File) func(*net.UnixConn) {
	return func(c *net.UnixConn) {
		var fds []int
		for _, f := range files {
			fds = append(fds, int(f.Fd()))
		}
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		if _, _, err := c.WriteMsgUnix([]byte{b}, oob, nil); err != nil {
			panic(err)
		}
	}
}

// The hello is one byte with one descriptor, of the host's pid namespace;
// anything else is refused.
func TestHelloChecksThePidNamespace(t *testing.T) {
	host, err := OwnPidNamespace()
	if err != nil {
		t.Fatal(err)
	}
	if err := check(t, host, func(c *net.UnixConn) {
		if err := SendHello(c); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatalf("the host's hello was refused: %v", err)
	}
	ns, err := os.Open(ownPidNamespace)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	netNS, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer netNS.Close()
	for _, tc := range []struct {
		what string
		send func(*net.UnixConn)
		want string
	}{
		{"no descriptor", sendWith(HelloV1), "0 descriptors"},
		{"two descriptors", sendWith(HelloV1, ns, ns), "2 descriptors"},
		{"another byte", sendWith('{', ns), "no hello"},
		{"nothing", func(c *net.UnixConn) { _ = c.CloseWrite() }, "no hello"},
		{"a file", sendWith(HelloV1, devNull), "not the host's"},
		{"another namespace of the host", sendWith(HelloV1, netNS), "not the host's"},
	} {
		if err := check(t, host, tc.send); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.what, err, tc.want)
		}
	}
	// A zero identity (a configuration without it) is no one's.
	if err := check(t, NamespaceID{}, func(c *net.UnixConn) { _ = SendHello(c) }); err == nil {
		t.Error("a zero identity accepted the host's hello")
	}
}

// A pid namespace below the host's (a pod's) is not the host's.
func TestHelloRefusesAChildPidNamespace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a pid namespace needs root")
	}
	host, err := OwnPidNamespace()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	child, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	if err := check(t, host, sendWith(HelloV1, child)); err == nil || !strings.Contains(err.Error(), "not the host's") {
		t.Fatalf("a child pid namespace: %v", err)
	}
}

// A client says hello only to a socket whose listener is the pod's PID 1,
// as the pod directory's pid file names it and podpid verifies it: one an
// app put at the path would get a descriptor of the host's pid namespace.
// The listener here is no pod's PID 1 (it is the init of no pid
// namespace), so a pid file naming it is refused too: an app that could
// write the pid file beside its socket gets nothing.
func TestHelloOnlyToPidOne(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	// Never accepted: a connection is queued, and what the client sends
	// buffered, all the same.
	defer l.Close()
	for _, tc := range []struct {
		pidFile string
		ok      bool
	}{
		{fmt.Sprintf("%d\n", os.Getpid()), false},
		{fmt.Sprintf("%d\n", os.Getpid()+1), false},
		{"", false},
		{"x\n", false},
	} {
		if err := os.WriteFile(filepath.Join(dir, layout.Pid), []byte(tc.pidFile), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		err = Hello(c, dir)
		c.Close()
		if (err == nil) != tc.ok {
			t.Errorf("pid file %q: %v, want ok %v", tc.pidFile, err, tc.ok)
		}
	}
}
