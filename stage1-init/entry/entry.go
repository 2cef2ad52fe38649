// Package entry is the stage1's entry points rkt runs on the host besides
// run: stop, gc, enter, attach and the app operations of a mutable pod
// (app-add, app-start, app-stop, app-rm). Each is a short-lived process in
// the host's namespaces, with the pod directory as its cwd; none links
// PID 1's supervisor.
package entry

import (
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/status"
)

// Role names of the entry points this package serves (argv[0]'s base
// name, the stage1 image manifest's entry point links).
const (
	roleStop = "stop"
	roleGC   = "gc"
)

// Main runs the entry point role with args and returns its exit code; ok
// is false when role is none of this package's.
func Main(role string, args []string) (code int, ok bool) {
	switch role {
	case roleStop:
		return stopMain(args), true
	case roleGC:
		return gcMain(args), true
	case roleAppAdd, roleAppStart, roleAppStop, roleAppRm:
		return appOpMain(role, args), true
	case roleEnter:
		return enterMain(args), true
	case roleAttach:
		return attachMain(args), true
	}
	return 0, false
}

// fail prints the one line a failure gets and returns rkt's stage1 failure
// code.
func fail(err error) int {
	logx.Errorf("%v", err)
	return status.CodeStage1Failure
}
