// Command stage1-init is pod1's stage1 for rkt: one static binary whose
// role is chosen by the name it is run under. rkt's stage0 runs it as the
// entry points named in the stage1 image manifest: "run", "stop", "gc",
// "enter", "attach", "app-add", "app-start", "app-stop" and "app-rm".
// The image's "run" is the waiter (waiter/waiter.c), which starts this
// binary as "run" for the pod's set-up: it executes the start-path binary
// next to it, pod1-init (this package built with the tag pod1init:
// dispatch_init.go), as the pod's PID 1, and the waiter's binary as the
// lock keeper that holds the pod's lock outside its pid namespace
// ("pod1-lock"), both as the waiter's children. PID 1 re-executes its own binary as each app's first process ("pod1-app"),
// which becomes the app. Networking is the image's other binary, net-setup
// (stage1-net).

// The runtime's cgroup-aware GOMAXPROCS (Go 1.25) keeps descriptors open on
// the cgroup files of wherever the process started, the host's cgroup
// for PID 1: anything that may read PID 1's /proc/1/fd could reopen them
// for writing. main sets GOMAXPROCS itself.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/status"
)

// Role names: argv[0]'s base name.
const (
	roleRun  = "run"
	roleInit = "pod1-init"
	roleApp  = "pod1-app"
	roleStop = "stop"
	roleGC   = "gc"
)

// version is pod1's (git describe), set by the Makefile: the stage1
// image's version label is the same, so a pod's stage1 binaries can be
// matched to the image rkt cached them from.
var version = "dev"

func main() {
	// Not an entry point's argument list: rkt always passes the pod's
	// UUID or its own flags, never this alone.
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		_, _ = os.Stdout.WriteString("pod1 stage1 " + version + "\n")
		os.Exit(0)
	}
	// One P: every role does serial work (set up, wait, supervise one
	// loop), and three of them start at once on the pod's start path.
	// More Ps only meant more threads started, woken and, at the app's
	// execve and at exit, killed (docs/design-start.md, "Go runtime
	// settings"). Setting it also stops the runtime from
	// adjusting it to the cgroup's CPU limit.
	runtime.GOMAXPROCS(1)
	os.Exit(dispatch())
}

// nameProcess gives the process its role's name when it runs as one of
// roles. PID 1 is run from a read-only copy of its binary by its path in
// /proc/self/fd, which would name it after the fd's number in ps, top and
// pgrep. Called from an init function: the runtime runs those on the main
// thread, whose name is the process's.
func nameProcess(roles ...string) {
	role := filepath.Base(os.Args[0])
	if slices.Contains(roles, role) {
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
