// Package pid1 is the pod's PID 1 (pod1-init): run clones it into the
// pod's namespaces and hands it the pod (package handover); it sets the
// pod up in a root of its own, starts each app through a set-up process
// (pod1-app, its own binary again: appexec), supervises them (package
// supervisor), writes their statuses and exits last.
package pid1

import (
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/status"
)

// Main is PID 1's whole life; it returns the pod's exit code.
func Main() int { return initMain() }

// The process is named PID 1's role from an init function: the runtime
// runs those on the main thread, whose name is the process's.
func init() { nameProcess(handover.RoleInit) }

// nameProcess gives the process the name role when it runs as role. PID 1
// is run from a read-only copy of its binary by its path in
// /proc/self/fd, which would name it after the fd's number in ps, top
// and pgrep.
func nameProcess(role string) {
	if filepath.Base(os.Args[0]) == role {
		name := append([]byte(role), 0)
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
	}
}

// fail prints the one line a setup failure gets and returns rkt's stage1
// failure code.
func fail(err error) int {
	logx.Errorf("%v", err)
	return status.CodeStage1Failure
}
