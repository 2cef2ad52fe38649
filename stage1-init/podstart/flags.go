package podstart

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/network/netinfo"
	"github.com/pod1/pod1/podspec"
)

// runFlags are the flags rkt's stage0 passes to the run entry point
// (contract §2). Every one of them must be defined: Go's flag package
// fails on an unknown flag, and so does rkt's own stage1.
type runFlags struct {
	opts        podspec.Options
	net         string
	dnsConfMode string
	privUsers   string
	localConfig string
}

// usageError is a bad flag or argument: one line, exit 254.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func parseRunFlags(args []string) (*runFlags, error) {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&f.opts.Debug, "debug", false, "log to stderr")
	fs.StringVar(&f.net, "net", "default", "networks: host, none, default or names")
	fs.BoolVar(&f.opts.Interactive, "interactive", false, "one app with the caller's stdin")
	fs.StringVar(&f.privUsers, "private-users", "", "user namespace BASE:COUNT")
	fs.StringVar(&f.opts.MDSToken, "mds-token", "", "metadata service token")
	fs.StringVar(&f.localConfig, "local-config", "/etc/rkt", "local configuration directory")
	fs.StringVar(&f.opts.Hostname, "hostname", "", "pod hostname")
	fs.StringVar(&f.dnsConfMode, "dns-conf-mode", "", "resolv=MODE,hosts=MODE")
	fs.BoolVar(&f.opts.DisableCapabilities, "disable-capabilities-restriction", false, "ignore capability isolators")
	fs.BoolVar(&f.opts.DisablePaths, "disable-paths", false, "do not mask paths")
	fs.BoolVar(&f.opts.DisableSeccomp, "disable-seccomp", false, "ignore seccomp isolators")
	fs.BoolVar(&f.opts.Mutable, "mutable", false, "start with no apps and stay up")
	fs.StringVar(&f.opts.IPC, "ipc", "auto", "auto, private or parent")
	if err := fs.Parse(args); err != nil {
		return nil, &usageError{"flags: " + err.Error()}
	}
	if fs.NArg() != 1 {
		return nil, &usageError{fmt.Sprintf("UUID: want exactly one argument after the flags, got %d", fs.NArg())}
	}
	uuid, err := types.NewUUID(fs.Arg(0))
	if err != nil {
		return nil, &usageError{fmt.Sprintf("UUID %q is malformed: %v", fs.Arg(0), err)}
	}
	f.opts.UUID = uuid.String()
	if err := f.check(); err != nil {
		return nil, err
	}
	return &f, nil
}

func (f *runFlags) check() error {
	// Every entry is checked here, before anything starts: net-setup,
	// which checks them too, runs only for pods with networks.
	if _, err := netinfo.ParseNetList(f.net); err != nil {
		return &usageError{err.Error()}
	}
	f.opts.Net = strings.Split(f.net, ",")
	switch f.opts.IPC {
	case "auto", "private", "parent":
	default:
		return &usageError{fmt.Sprintf("--ipc=%q: want auto, private or parent", f.opts.IPC)}
	}
	if f.opts.Hostname != "" {
		if err := netinfo.CheckHostname(f.opts.Hostname); err != nil {
			return &usageError{err.Error()}
		}
	}
	if f.privUsers != "" {
		u, err := idmap.Parse(f.privUsers)
		if err != nil {
			return &usageError{fmt.Sprintf("--private-users=%q: %v", f.privUsers, err)}
		}
		f.opts.PrivateUsers = u
	}
	f.opts.ResolvMode, f.opts.HostsMode = "default", "default"
	if f.dnsConfMode == "" {
		return nil
	}
	for _, part := range strings.Split(f.dnsConfMode, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch {
		case k == "resolv" && (v == "host" || v == "stage0" || v == "none" || v == "default"):
			f.opts.ResolvMode = v
		case k == "hosts" && (v == "host" || v == "stage0" || v == "default"):
			f.opts.HostsMode = v
		default:
			return &usageError{fmt.Sprintf("--dns-conf-mode=%q: bad entry %q (want resolv=host|stage0|none|default, hosts=host|stage0|default)", f.dnsConfMode, part)}
		}
	}
	return nil
}
