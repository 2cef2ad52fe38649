package control

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Authenticate is authenticate, for PID 1's other sockets (rkt attach's
// endpoints).
func Authenticate(c *net.UnixConn) error { return authenticate(c) }

// authenticate accepts only root peers outside the pod's pid namespace.
// SO_PEERCRED translates the peer's pid into the receiver's (PID 1's) pid
// namespace, where a process of the host, or of any namespace that is not
// the pod's or below it, has no pid: 0.
func authenticate(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return credErr
	}
	if cred.Pid != 0 {
		return fmt.Errorf("peer pid %d is inside the pod", cred.Pid)
	}
	if cred.Uid != 0 {
		return fmt.Errorf("peer uid %d is not root", cred.Uid)
	}
	return nil
}
