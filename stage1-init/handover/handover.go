// Package handover is what the stage1's processes hand each other: the
// descriptors run passes PID 1 at fixed numbers, the messages on them,
// and the names each process is started under.
package handover

import "golang.org/x/sys/unix"

// What run hands PID 1 besides its stdio, at fixed fd numbers. PID 1 marks
// them all close-on-exec first thing: no process it starts inherits one.
const (
	// ConfigFd is where PID 1 reads the pod from the run entry point:
	// its configuration (JSON), then HostReady, then the pipe's end.
	ConfigFd = 3
	// LockSlotFd is not passed to PID 1: it held the pod's lock, which
	// leads to the host's pod directory, and PID 1 holds nothing of the
	// host; the lock keeper holds it until PID 1 is gone.
	LockSlotFd = 4
	// ParentFd is a pidfd of the run process, readable once run is
	// dead; -1 (not passed) on kernels without pidfd_open.
	ParentFd = 5
	// ReadyFd is the write end of a pipe on which PID 1 says its
	// signal handling is installed; run names PID 1 in the pid file
	// (which is how stop finds it) and passes stop requests on only
	// after that, so no stop reaches PID 1 while the Go runtime's
	// defaults would exit or drop it.
	ReadyFd = 6
	// LogDirFd and CRIDirFd are the pod's log directory and the CRI log
	// directory (run's openLogSinks), when the pod writes there: PID 1
	// writes its log files through them, never through a path. Each is
	// a detached copy of the directory, from which ".." leads nowhere.
	LogDirFd = 7
	CRIDirFd = 8
	// CommitFd is the write end of the lock keeper's commit pipe: an
	// app's name on it, a line, says its final status waits for the
	// keeper's commit (PID 1's appOS.WriteStatus).
	CommitFd = 9
	// PauseExeFd is pod1-pause, the init of the apps' pid namespace: a
	// detached read-only mount of the file next to run's binary (a
	// process started from it has a /proc/PID/exe that leads nowhere
	// writable, as for every stage1 process).
	PauseExeFd = 10
)

// HostReady follows the pod's configuration on ConfigFd once run has
// placed PID 1 in the pod's cgroups, the host's last step before the pod
// may start apps. PID 1 sets itself up from its configuration meanwhile,
// and starts no app before it has read this and the pipe's end: a pipe
// that ends without it (run failed, and kills PID 1, or died) ends the
// pod before anything starts.
const HostReady = "host ready\n"

// Stage1Cgroup is the child of the pod's cgroup that run places PID 1 in
// (the apps' are its siblings).
const Stage1Cgroup = "stage1"

// The names the stage1's processes are started under (argv[0]), which
// each binary dispatches on, and the binaries next to run's that it
// starts them from.
const (
	// RoleRun is the Go run, the waiter's child while it sets the pod
	// up.
	RoleRun = "run"
	// RoleInit is the pod's PID 1, run from InitBinary.
	RoleInit = "pod1-init"
	// RoleApp is an app's set-up process, which becomes the app: PID 1
	// (and enter, for an app in a user namespace) re-executes its own
	// binary under this name.
	RoleApp = "pod1-app"
	// InitBinary is the start-path binary: PID 1 and the apps' set-up.
	InitBinary = "pod1-init"
	// PauseBinary is the init of the apps' pid namespace, which PID 1
	// starts from PauseExeFd.
	PauseBinary = "pod1-pause"
)

// CloseOnExecFrom3 marks every inherited fd above stderr close-on-exec, so
// whatever the process that started this one left open never reaches a
// child (threats T1). Each stage1 process does it first thing, then takes
// what it was handed at the numbers above.
func CloseOnExecFrom3() error {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
