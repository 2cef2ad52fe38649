//go:build pod1init

package main

import (
	"os"
	"path/filepath"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/status"
)

func init() { nameProcess(roleInit) }

// dispatch of the start-path binary, pod1-init (built with the tag
// pod1init): the pod's PID 1, and the apps' first processes it starts. It links none of what only
// the host side needs (the manifest schema, netlink, CNI): run validates
// everything and hands PID 1 a checked plan (package podplan).
func dispatch() int {
	role := filepath.Base(os.Args[0])
	logx.SetRole("stage1", role)
	if logx.DebugArg(os.Args[1:]) {
		logx.SetDebug(true)
	}
	switch role {
	case roleInit:
		return initMain()
	case roleApp:
		return appexec.Child()
	default:
		logx.Errorf("unknown role %q (pod1-init is started by run, as pod1-init)", role)
		return status.CodeStage1Failure
	}
}
