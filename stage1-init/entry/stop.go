package entry

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// stopMain is the stop entry point ([--force] UUID, cwd = pod dir): it asks
// the pod's PID 1 to stop the pod, gracefully (SIGTERM) or at once
// (SIGUSR1: every app SIGKILLed now, statuses still written).
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
	b, err := safefile.ReadRegularIn(".", layout.Pid, 64)
	if err != nil {
		return fail(fmt.Errorf("read pid: %w", err))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fail(fmt.Errorf("pid file holds %q", b))
	}
	sig := unix.SIGTERM
	if *force {
		sig = unix.SIGUSR1
	}
	fd, err := openPodInit(pid)
	if errors.Is(err, errPodGone) {
		return 0
	}
	if err != nil {
		return fail(fmt.Errorf("pid file: %w", err))
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fail(fmt.Errorf("signal pod init %d: %w", pid, err))
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
	return 0
}
