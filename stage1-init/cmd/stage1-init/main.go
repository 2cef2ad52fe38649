// Command stage1-init is the binary of pod1's stage1 that runs on the
// host: its role is chosen by the name it is run under. rkt's stage0 runs
// it as the entry points named in the stage1 image manifest: "stop",
// "gc", "enter", "attach", "app-add", "app-start", "app-stop" and
// "app-rm" (package entry). The image's "run" is the waiter
// (waiter/waiter.c), which starts this binary as "run" for the pod's
// set-up (package podstart): it executes the start-path binary next to
// it, pod1-init (cmd/pod1-init), as the pod's PID 1, and the waiter's
// binary as the lock keeper that holds the pod's lock outside its pid
// namespace ("pod1-lock"), both as the waiter's children. Networking is
// the image's other binary, net-setup (stage1-net).

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
	"runtime"
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
