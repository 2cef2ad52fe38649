// Package podstart is the Go run, the pod's start: started by the waiter
// (waiter/waiter.c) as its child, it validates the pod, prepares the host
// side (cgroups, networks, the pod's files), clones the pod's PID 1
// (package pid1) and the lock keeper as the waiter's children, hands PID 1
// the pod (package handover) and reports to the waiter, then exits.
package podstart

import (
	"encoding/json"
	"path/filepath"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/status"
)

// Main is the run entry point's set-up of the pod (args: rkt's run flags
// and the pod's UUID); it returns only on a failure, or when it could not
// hand PID 1 over to the waiter.
func Main(args []string) int { return runMain(args) }

// fail prints the one line a setup failure gets and returns rkt's stage1
// failure code.
func fail(err error) int {
	logx.Errorf("%v", err)
	return status.CodeStage1Failure
}

// saveOptions records the run's options, which the app entry points and
// enter read back (entry's loadOptions) to resolve an app as run did.
func saveOptions(podDir string, opts *podspec.Options) error {
	b, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	return safefile.WriteIn(filepath.Join(podDir, layout.Pod1Dir), filepath.Base(layout.OptionsFile), b, 0o644, safefile.Volatile)
}
