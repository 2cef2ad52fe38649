//go:build !pod1init

package main

import (
	"os"
	"path/filepath"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/status"
)

func init() { nameProcess(roleInit) }

func dispatch() int {
	role := filepath.Base(os.Args[0])
	if role == "stage1-init" {
		logx.SetRole("stage1", roleRun)
	} else {
		logx.SetRole("stage1", role)
	}
	if logx.DebugArg(os.Args[1:]) {
		logx.SetDebug(true)
	}
	switch role {
	case roleRun, "stage1-init":
		// Which build rkt took from its cache, for a --debug run.
		logx.Debugf("pod1 stage1 %s", version)
		return runMain(os.Args[1:])
	case roleInit:
		return initMain()
	case roleApp:
		return appexec.Child()
	case roleStop:
		return stopMain(os.Args[1:])
	case roleGC:
		return gcMain(os.Args[1:])
	case roleAppAdd, roleAppStart, roleAppStop, roleAppRm:
		return appOpMain(role, os.Args[1:])
	case roleEnter:
		return enterMain(os.Args[1:])
	case roleAttach:
		return attachMain(os.Args[1:])
	default:
		logx.Errorf("unknown role %q (run me as one of the entry points the stage1 manifest names)", role)
		return status.CodeStage1Failure
	}
}
