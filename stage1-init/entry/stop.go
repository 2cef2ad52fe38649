package entry

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podjournal"
	"github.com/pod1/pod1/podmounts"
	"github.com/pod1/pod1/podpid"
	"github.com/pod1/pod1/sigpolicy"
)

// stopMain is the stop entry point ([--force] UUID, cwd = pod dir): it asks
// the pod's PID 1 to stop the pod, gracefully or at once (every app
// SIGKILLed now, statuses still written), with the signal sigpolicy names
// for that request, once podpid has checked that the pid file names the
// pod's PID 1.
func stopMain(args []string) int {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	force := fs.Bool("force", false, "kill the apps now")
	if err := fs.Parse(args); err != nil {
		return fail(fmt.Errorf("flags: %w", err))
	}
	if fs.NArg() != 1 {
		return fail(errors.New("UUID: want exactly one argument"))
	}
	if _, err := types.NewUUID(fs.Arg(0)); err != nil {
		return fail(fmt.Errorf("UUID %q is malformed: %w", fs.Arg(0), err))
	}
	pid1, err := podpid.Open(".")
	if errors.Is(err, podpid.ErrGone) {
		return 0
	}
	if err != nil {
		return fail(fmt.Errorf("pid file: %w", err))
	}
	defer pid1.Close()
	if err := pid1.Signal(sigpolicy.Forward(sigpolicy.Request(*force))); err != nil && !errors.Is(err, podpid.ErrGone) {
		return fail(fmt.Errorf("signal pod init %d: %w", pid1.Pid, err))
	}
	return 0
}

// gcMain is the gc entry point ([--debug] [--local-config DIR] UUID, cwd =
// pod dir, no lock fd). The namespaces and the mounts in them die with the
// pod's processes; what can outlive a killed stage1 is the pod's cgroups,
// which it removes, and its CNI networks, which net-setup tears down. It is idempotent and tolerant of a pod that never
// started.
func gcMain(args []string) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	debug := fs.Bool("debug", false, "log to stderr")
	localConfig := fs.String("local-config", "/etc/rkt", "local configuration directory")
	if err := fs.Parse(args); err != nil {
		return fail(fmt.Errorf("flags: %w", err))
	}
	if fs.NArg() != 1 {
		return fail(errors.New("UUID: want exactly one argument"))
	}
	uuid, err := types.NewUUID(fs.Arg(0))
	if err != nil {
		return fail(fmt.Errorf("UUID %q is malformed: %w", fs.Arg(0), err))
	}
	if err := gcCgroups(uuid.String()); err != nil {
		return fail(fmt.Errorf("gc: %w", err))
	}
	podDir, err := os.Getwd()
	if err != nil {
		return fail(fmt.Errorf("gc: pod directory: %w", err))
	}
	// After the cgroups: every pod process is gone, and no plugin
	// runs against a namespace something still uses.
	if err := gcNetworks(podDir, *localConfig, fs.Arg(0), *debug); err != nil {
		return fail(fmt.Errorf("gc: %w", err))
	}
	// The pod's journal's link in the host's, which rkt's stage1's gc
	// removed too.
	if err := podjournal.Unlink(layout.HostJournalDir, uuid.String()); err != nil {
		return fail(fmt.Errorf("gc: %w", err))
	}
	// rkt's gc would leave the copies of the apps' overlays under a
	// second path of the data directory (package podmounts).
	if err := podmounts.UnmountCopied(podDir); err != nil {
		return fail(fmt.Errorf("gc: %w", err))
	}
	return 0
}
