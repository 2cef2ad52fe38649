package handover

import (
	"errors"
	"strconv"

	"golang.org/x/sys/unix"
)

// NoFd leaves a descriptor's slot in a child's files empty
// (syscall.ProcAttr.Files): the child has nothing at that number.
const NoFd = ^uintptr(0)

// PID1Files are the descriptors run hands PID 1, NoFd for one it does not
// pass.
type PID1Files struct {
	Stdin, Stdout, Stderr uintptr
	Config                uintptr
	Parent                uintptr
	Ready                 uintptr
	LogDir, CRIDir        uintptr
	Commit                uintptr
	PauseExe              uintptr
	JournalDir            uintptr
}

// Files returns f indexed by each descriptor's number in PID 1, for
// syscall.ProcAttr.Files.
func (f *PID1Files) Files() []uintptr {
	files := make([]uintptr, JournalDirFd+1)
	files[0], files[1], files[2] = f.Stdin, f.Stdout, f.Stderr
	files[ConfigFd] = f.Config
	files[LockSlotFd] = NoFd
	files[ParentFd] = f.Parent
	files[ReadyFd] = f.Ready
	files[LogDirFd], files[CRIDirFd] = f.LogDir, f.CRIDir
	files[CommitFd] = f.Commit
	files[PauseExeFd] = f.PauseExe
	files[JournalDirFd] = f.JournalDir
	return files
}

// KeeperFiles are the descriptors run hands the lock keeper, NoFd for one
// it does not pass; the keeper has no stdin or stdout.
type KeeperFiles struct {
	Stderr uintptr
	Lock   uintptr
	PID1   uintptr
	Commit uintptr
	Done   uintptr
}

// Files returns f indexed by each descriptor's number in the keeper, for
// syscall.ProcAttr.Files.
func (f *KeeperFiles) Files() []uintptr {
	files := make([]uintptr, KeeperDoneFd+1)
	files[0], files[1], files[2] = NoFd, NoFd, f.Stderr
	files[KeeperLockFd] = f.Lock
	files[KeeperPID1Fd] = f.PID1
	files[KeeperCommitFd] = f.Commit
	files[KeeperDoneFd] = f.Done
	return files
}

// Report is what run tells the waiter once PID 1 is ready and named in the
// pid file.
type Report struct {
	PID1, Keeper int
	// Stage2 is the bind mount to undo at the pod's end, "" for none.
	Stage2 string
	// Cgroups are the pod's cgroup directories, to empty at its end.
	Cgroups []string
}

// Encode is the report as the waiter reads it: NUL-ended fields, in the
// order of the Report* field numbers. A path with a NUL in it has no
// place in it.
func (r *Report) Encode() ([]byte, error) {
	stage2 := r.Stage2
	if stage2 == "" {
		stage2 = ReportNoBind
	}
	fields := make([]string, ReportFirstCgroup, ReportFirstCgroup+len(r.Cgroups))
	fields[ReportPID1] = strconv.Itoa(r.PID1)
	fields[ReportKeeper] = strconv.Itoa(r.Keeper)
	fields[ReportStage2] = stage2
	fields = append(fields, r.Cgroups...)
	var b []byte
	for _, f := range fields {
		for i := range len(f) {
			if f[i] == 0 {
				return nil, errors.New("waiter report: a NUL in a path")
			}
		}
		b = append(append(b, f...), 0)
	}
	return b, nil
}

// CloseOnExecFrom3 marks every inherited fd above stderr close-on-exec, so
// whatever the process that started this one left open never reaches a
// child (threats T1). Each stage1 process does it first thing, then takes
// what it was handed at the numbers of this package.
func CloseOnExecFrom3() error {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
