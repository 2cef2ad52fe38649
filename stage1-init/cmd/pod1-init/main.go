// Command pod1-init is the stage1's start-path binary, which run executes
// from next to itself: the pod's PID 1 (package pid1), and the apps'
// first processes PID 1 starts from its own binary (pod1-app, package
// appexec). It links none of what only the host side needs (the manifest
// schema, netlink, CNI): run validates everything and hands PID 1 a
// checked plan (package podplan).

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

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/stage1-init/pid1"
	"github.com/pod1/pod1/status"
)

// version is pod1's (git describe), set by the Makefile, as stage1-init's.
var version = "dev"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		_, _ = os.Stdout.WriteString("pod1 stage1 " + version + "\n")
		os.Exit(0)
	}
	// One P, as in every role (cmd/stage1-init).
	runtime.GOMAXPROCS(1)
	os.Exit(dispatch())
}

// dispatch runs the role argv[0] names: PID 1, or an app's set-up.
func dispatch() int {
	role := filepath.Base(os.Args[0])
	logx.SetRole("stage1", role)
	if logx.DebugArg(os.Args[1:]) {
		logx.SetDebug(true)
	}
	switch role {
	case handover.RoleInit:
		return pid1.Main()
	case handover.RoleApp:
		return appexec.Child()
	default:
		logx.Errorf("unknown role %q (pod1-init is started by run, as pod1-init)", role)
		return status.CodeStage1Failure
	}
}
