package main

import (
	"os"
	"path/filepath"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/stage1-init/entry"
	"github.com/pod1/pod1/stage1-init/handover"
	"github.com/pod1/pod1/stage1-init/podstart"
	"github.com/pod1/pod1/status"
)

// dispatch runs the role argv[0] names: run (also under the binary's
// own name), an entry point of package entry, or pod1-app, the set-up of
// a process enter starts in an app's user namespace (appexec.RunInUserNS
// executes this binary again).
func dispatch() int {
	role := filepath.Base(os.Args[0])
	if role == "stage1-init" {
		logx.SetRole("stage1", handover.RoleRun)
	} else {
		logx.SetRole("stage1", role)
	}
	if logx.DebugArg(os.Args[1:]) {
		logx.SetDebug(true)
	}
	switch role {
	case handover.RoleRun, "stage1-init":
		// Which build rkt took from its cache, for a --debug run.
		logx.Debugf("pod1 stage1 %s", version)
		return podstart.Main(os.Args[1:])
	case handover.RoleApp:
		return appexec.Child()
	}
	if code, ok := entry.Main(role, os.Args[1:]); ok {
		return code
	}
	logx.Errorf("unknown role %q (run me as one of the entry points the stage1 manifest names)", role)
	return status.CodeStage1Failure
}
