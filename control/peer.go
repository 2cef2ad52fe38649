package control

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/podpid"
)

// NamespaceID names a namespace as its nsfs file does: device and inode,
// unique while the namespace lives.
type NamespaceID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// IsZero reports an unset identity.
func (id NamespaceID) IsZero() bool { return id == NamespaceID{} }

// ownPidNamespace is the file that names the caller's pid namespace.
const ownPidNamespace = "/proc/self/ns/pid"

// atStatxDontSync is AT_STATX_DONT_SYNC (linux/fcntl.h), which
// golang.org/x/sys does not name: the attributes the kernel has, without
// asking the file's file system.
const atStatxDontSync = 0x4000

// OwnPidNamespace identifies the caller's pid namespace: run records it,
// as the host's, for PID 1 (podplan.Pod.HostPidNS).
func OwnPidNamespace() (NamespaceID, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, ownPidNamespace, atStatxDontSync, unix.STATX_INO, &st); err != nil {
		return NamespaceID{}, fmt.Errorf("%s: %w", ownPidNamespace, err)
	}
	return NamespaceID{Dev: unix.Mkdev(st.Dev_major, st.Dev_minor), Ino: st.Ino}, nil
}

// HelloV1 is the first byte a client sends on each of PID 1's sockets
// (the control socket, an app's attach sockets), with one descriptor of
// its own pid namespace (SCM_RIGHTS): PID 1 serves only a peer that
// holds the host's (Peers.Authenticate). It is the protocol's version: what
// follows is the socket's own protocol, unchanged.
const HelloV1 = 1

// helloTimeout bounds how long PID 1 waits for a client's hello.
const helloTimeout = 10 * time.Second

// Hello is what each of pod1's clients sends first on PID 1's sockets, once
// it knows the socket is served by the pod's PID 1 (ServedByPID1: the
// hello hands over a descriptor of the host's pid namespace, which
// nothing of a pod may hold). podDir is the pod directory.
func Hello(c net.Conn, podDir string) error {
	if err := ServedByPID1(c, podDir); err != nil {
		return err
	}
	return SendHello(c)
}

// SendHello sends HelloV1 on c, with a descriptor of the caller's pid
// namespace.
func SendHello(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("hello: not a Unix socket")
	}
	ns, err := os.Open(ownPidNamespace)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	defer ns.Close()
	if _, _, err := uc.WriteMsgUnix([]byte{HelloV1}, unix.UnixRights(int(ns.Fd())), nil); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	return nil
}

// ServedByPID1 checks that the server of c is the pod's PID 1: the
// listening process, as SO_PEERCRED reports it to a client, must be the
// process the pod directory's pid file names, once podpid has checked
// that it is this pod's PID 1. An app that can write in PID 1's root could
// have put a socket of its own at the path, and the pid file of its own
// process beside it.
func ServedByPID1(c net.Conn, podDir string) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a Unix socket")
	}
	pid1, err := podpid.Open(podDir)
	if err != nil {
		return fmt.Errorf("the pod's PID 1: %w", err)
	}
	defer pid1.Close()
	cred, err := peerCred(uc)
	if err != nil {
		return err
	}
	if int(cred.Pid) != pid1.Pid || cred.Uid != 0 {
		return fmt.Errorf("the socket's server (pid %d, uid %d) is not the pod's PID 1 (pid %d)", cred.Pid, cred.Uid, pid1.Pid)
	}
	return nil
}

// peerCred is c's peer's credentials, as the kernel took them (at connect
// for a client, at listen for a server).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}

// Peers checks the peers of PID 1's sockets: root, in the pid namespace
// run was started in (the host's), identified by host.
type Peers struct {
	host NamespaceID
}

// NewPeers returns the check for a pod whose run recorded host as its
// own pid namespace. A zero host refuses every peer.
func NewPeers(host NamespaceID) *Peers { return &Peers{host: host} }

// Authenticate checks c's peer and reads its hello; nil accepts it, and
// the socket's own protocol follows. It is PID 1's check for all its
// sockets.
//
// SO_PEERCRED (taken by the kernel at connect) says the peer runs as root
// and outside the pod's pid namespace (its pid there is 0), but not where:
// a process of another pod is outside too. The descriptor of its pid
// namespace that it sends says where, and it cannot forge one: a process
// opens only the namespaces of processes it can see (the pod's own
// /proc shows none of the host's), and NS_GET_PARENT refuses a namespace
// above its own. The descriptor is a file the peer chose, though: it is
// identified from the attributes the kernel holds (statx without sync,
// which no file system is asked for), and only a file on the host's
// namespace's own device is asked anything more.
func (p *Peers) Authenticate(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return err
	}
	if cred.Pid != 0 {
		return fmt.Errorf("peer pid %d is inside the pod", cred.Pid)
	}
	if cred.Uid != 0 {
		return fmt.Errorf("peer uid %d is not root", cred.Uid)
	}
	if p == nil || p.host.IsZero() {
		return errors.New("the host's pid namespace is unknown")
	}
	fd, err := readHello(c)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return p.isHost(fd)
}

// readHello reads a client's hello (exactly its one byte) and returns the
// descriptor it came with.
func readHello(c *net.UnixConn) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(helloTimeout)); err != nil {
		return -1, err
	}
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var b [1]byte
	// Room for two descriptors: a second one sent is seen (and refused)
	// rather than dropped by the kernel.
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(b[:], oob)
	// Every descriptor received is ours to close, whatever else is
	// wrong.
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	fail := func(err error) (int, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, err
	}
	switch {
	case err != nil:
		return fail(fmt.Errorf("no hello: %w", err))
	case n != 1 || b[0] != HelloV1:
		return fail(fmt.Errorf("no hello: first byte %q", b[:n]))
	case flags&unix.MSG_CTRUNC != 0 || len(fds) != 1:
		return fail(fmt.Errorf("hello came with %d descriptors, not its pid namespace's alone", len(fds)))
	}
	return fds[0], nil
}

// isHost checks that fd is the host's pid namespace.
func (p *Peers) isHost(fd int) error {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|atStatxDontSync, unix.STATX_INO, &st); err != nil {
		return fmt.Errorf("peer's pid namespace: %w", err)
	}
	if got := (NamespaceID{Dev: unix.Mkdev(st.Dev_major, st.Dev_minor), Ino: st.Ino}); got != p.host {
		return fmt.Errorf("peer's pid namespace is not the host's (%d:%d, not %d:%d)", got.Dev, got.Ino, p.host.Dev, p.host.Ino)
	}
	// The device is nsfs's: what follows asks no other file system.
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return errors.New("peer's pid namespace is not a namespace")
	}
	if t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWPID {
		return errors.New("peer's pid namespace is not a pid namespace")
	}
	return nil
}
