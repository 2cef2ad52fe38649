package podenv

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// In a new network namespace lo is down; loopbackUp brings it up.
func TestLoopbackUp(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it makes a network namespace")
	}
	flags := func() (uint16, error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return 0, err
		}
		err = unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr)
		return ifr.Uint16(), err
	}
	done := make(chan error, 1)
	var before, after uint16
	go func() {
		// The thread stays locked: it is in the new namespace, and
		// the runtime ends it with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		var err error
		if before, err = flags(); err != nil {
			done <- err
			return
		}
		if err := loopbackUp(); err != nil {
			done <- err
			return
		}
		after, err = flags()
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if before&unix.IFF_UP != 0 {
		t.Fatalf("lo up in a new namespace before loopbackUp (flags %#x)", before)
	}
	if after&unix.IFF_UP == 0 || after&unix.IFF_RUNNING == 0 {
		t.Fatalf("lo not up after loopbackUp: flags %#x", after)
	}
}
