// Package handover is every descriptor and message the stage1's processes
// hand each other, in one place:
//
//	waiter -> run      WaiterEnv: the report pipe, the waiter's pid, the
//	                   keeper's done pipe
//	run -> PID 1       fds ConfigFd..JournalDirFd (PID1Files): the pod's
//	                   configuration then HostReady, run's pidfd, the
//	                   ready pipe, the log directories, the commit pipe,
//	                   pod1-pause's binary, the pod's journal directory
//	PID 1 -> run       ReadyByte on ReadyFd: its signal table is in
//	run -> keeper      fds KeeperLockFd..KeeperDoneFd (KeeperFiles), the
//	                   status directory as its argument
//	PID 1 -> keeper    the commit pipe: an app's name a line
//	                   (CommitLineEnd)
//	keeper -> waiter   a byte on the done pipe: the lock is let go
//	run -> waiter      the report (Report): NUL-ended fields
//	PID 1 -> pause     PauseSockFd: its socket
//
// and the names each process is started under. The C programs (the
// waiter, which is also the keeper, and pod1-pause) take the numbers and
// names from waiter/handover.h, which go generate makes from this file's
// constants (mkheader); a test fails when the two differ. Every constant
// of this file is in the header: it is the contract, and holds nothing
// else.
package handover

//go:generate go run ./mkheader -o ../../waiter/handover.h

// The names the stage1's processes are started under (argv[0]), which
// each binary dispatches on, and the binaries they are started from, all
// in the stage1 image's rootfs, next to each other.
const (
	// Stage1Binary is the Go host side: run and the other entry points.
	Stage1Binary = "stage1-init"
	// RoleRun is the Go run: the waiter starts Stage1Binary under this
	// name, as its child, to set the pod up.
	RoleRun = "run"
	// InitBinary is the start-path binary: PID 1 and the apps' set-up.
	InitBinary = "pod1-init"
	// RoleInit is the pod's PID 1, which run starts from InitBinary.
	RoleInit = "pod1-init"
	// RoleApp is an app's set-up process, which becomes the app: PID 1
	// (and enter, for an app in a user namespace) re-executes its own
	// binary under this name.
	RoleApp = "pod1-app"
	// WaiterBinary is the waiter (waiter/waiter.c), the image's run entry
	// point, and the lock keeper.
	WaiterBinary = "pod1-waiter"
	// RoleKeeper is the lock keeper: run starts WaiterBinary under this
	// name.
	RoleKeeper = "pod1-lock"
	// PauseBinary is pod1-pause (pause/pause.c), the init of the apps'
	// pid namespace, which PID 1 starts from PauseExeFd.
	PauseBinary = "pod1-pause"
	// RolePause is pod1-pause's name.
	RolePause = "pod1-pause"
	// RoleCgroupNS is PauseBinary started to make the apps' cgroup
	// namespace, on a host with only cgroup v2: PID 1 clones it into the
	// apps' cgroup (CLONE_INTO_CGROUP), it unshares its cgroup namespace,
	// which is rooted there, sends it on PauseSockFd and exits.
	RoleCgroupNS = "pod1-cgroupns"
)

// WaiterEnv names, in the Go run's environment, what the waiter passes
// it: "REPORT,PID,DONE", the fd of the report pipe's write end, the
// waiter's pid, and the fd of the write end of the pipe the waiter
// watches for the keeper's end of duty, which run hands the keeper as
// KeeperDoneFd.
const WaiterEnv = "POD1_WAITER_FD"

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
	// ParentFd is a pidfd of the waiter, readable once it is dead; not
	// passed on kernels without pidfd_open.
	ParentFd = 5
	// ReadyFd is the write end of a pipe on which PID 1 writes ReadyByte
	// once its signal handling is installed; run names PID 1 in the pid
	// file (which is how stop finds it) and passes stop requests on only
	// after that, so no stop reaches PID 1 while the Go runtime's
	// defaults would exit or drop it.
	ReadyFd = 6
	// LogDirFd and CRIDirFd are the pod's log directory and the CRI log
	// directory, when the pod writes there: PID 1 writes its log files
	// through them, never through a path. Each is a detached copy of the
	// directory, from which ".." leads nowhere.
	LogDirFd = 7
	CRIDirFd = 8
	// CommitFd is the write end of the lock keeper's commit pipe: an
	// app's name on it, ended by CommitLineEnd, says its final status
	// waits for the keeper's commit. PID 1 never waits on it.
	CommitFd = 9
	// PauseExeFd is pod1-pause: a detached read-only mount of the file
	// next to run's binary (a process started from it has a
	// /proc/PID/exe that leads nowhere writable, as for every stage1
	// process).
	PauseExeFd = 10
	// JournalDirFd is the pod's own journal's directory (podplan's
	// LogSinks.PodJournal), a detached copy like LogDirFd.
	JournalDirFd = 11
)

// HostReady follows the pod's configuration on ConfigFd once run has
// placed PID 1 in the pod's cgroups, the host's last step before the pod
// may start apps. PID 1 sets itself up from its configuration meanwhile,
// and starts no app before it has read this and the pipe's end: a pipe
// that ends without it (run failed, and kills PID 1, or died) ends the
// pod before anything starts.
const HostReady = "host ready\n"

// ReadyByte is what PID 1 writes on ReadyFd.
const ReadyByte = 1

// Stage1Cgroup is the child of the pod's cgroup that run places PID 1 in
// (the apps' are its siblings).
const Stage1Cgroup = "stage1"

// What run hands the lock keeper, which holds the pod's lock outside the
// pod's pid namespace until PID 1 is gone, then lets go of it; it has no
// stdin or stdout. Its argument is the status directory, relative to the
// pod directory.
const (
	// KeeperLockFd is the pod's lock: rkt's open file description of
	// the pod directory.
	KeeperLockFd = 3
	// KeeperPID1Fd is a pidfd of PID 1.
	KeeperPID1Fd = 4
	// KeeperCommitFd is the commit pipe's read end (CommitFd).
	KeeperCommitFd = 5
	// KeeperDoneFd is the write end of the waiter's done pipe
	// (WaiterEnv): a byte on it says the keeper let go of the lock.
	KeeperDoneFd = 6
)

// CommitLineEnd ends each app name on the commit pipe.
const CommitLineEnd = '\n'

// The report run writes to the waiter once PID 1 is ready and named in the
// pid file: NUL-ended fields, in this order. The pipe's end without one
// (run failed) leaves the pod to the waiter to end.
const (
	// ReportPID1 is PID 1's pid.
	ReportPID1 = 0
	// ReportKeeper is the lock keeper's pid.
	ReportKeeper = 1
	// ReportStage2 is the bind mount of a mutable pod's app directory
	// the waiter undoes at the end, or ReportNoBind.
	ReportStage2 = 2
	// ReportFirstCgroup is the first of the pod's cgroup directories,
	// one a field, which the waiter empties at the end.
	ReportFirstCgroup = 3
)

// ReportNoBind stands for no bind to undo in ReportStage2.
const ReportNoBind = "-"

// PauseSockFd is pod1-pause's socket to PID 1: the apps' pid namespace
// and its procfs instances come on it, and its root.
const PauseSockFd = 3
