// Command net-setup is the part of pod1's stage1 that runs CNI plugins.
// The run entry point execs it only for pods that ask for networks, and
// the gc entry point only for pods that have network state, so that no
// other process of the stage1 links libcni.
//
//	net-setup add --pid=N --net=LIST [--local-config=DIR] [--dns] [--debug] UUID
//	net-setup del [--local-config=DIR] [--debug] UUID
//
// Both run with the pod directory as their working directory, and name
// the stage1's files relative to it, as rkt's stage1 does (the plugins'
// CNI_PATH ends in stage1/rootfs/usr/lib/rkt/plugins/net). add exits
// 254 with one line naming the network and the cause, having undone what
// it did.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/network"
	"github.com/pod1/pod1/network/netinfo"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/status"
)

// timeout bounds a whole setup or teardown: a plugin that hangs must not
// hold the pod's start (or gc) forever.
const timeout = 2 * time.Minute

// faultEnv names a step of the setup at which the tests have run killed
// (network.Params.Step).
const faultEnv = "POD1_TEST_NET_KILL_AT"

// version is pod1's (git describe), set by the Makefile.
var version = "dev"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		_, _ = os.Stdout.WriteString("pod1 net-setup " + version + "\n")
		os.Exit(0)
	}
	logx.SetRole("stage1", "net-setup")
	if logx.DebugArg(os.Args[1:]) {
		logx.SetDebug(true)
	}
	if len(os.Args) < 2 {
		logx.Errorf("want add or del")
		os.Exit(status.CodeStage1Failure)
	}
	// Plugins run iptables, which the host has in sbin.
	path := os.Getenv("PATH")
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if !strings.Contains(":"+path+":", ":"+d+":") {
			path = strings.TrimPrefix(path+":"+d, ":")
		}
	}
	_ = os.Setenv("PATH", path)
	var err error
	switch os.Args[1] {
	case "add":
		err = add(os.Args[2:])
		if err != nil {
			logx.Errorf("failed to setup network: %v", err)
		}
	case "del":
		err = del(os.Args[2:])
		if err != nil {
			logx.Errorf("network teardown: %v", oneLine(err))
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
		logx.Errorf("%v", err)
	}
	if err != nil {
		os.Exit(status.CodeStage1Failure)
	}
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// common is what add and del both take: --local-config, --debug, the
// pod's UUID after the flags, and the pod directory (the working
// directory).
type common struct {
	localConfig string
	debug       bool
	uuid        string
	podDir      string
}

// parse registers the flags both commands take on fs, next to the
// command's own, parses args and reads the UUID and the pod directory.
func parse(fs *flag.FlagSet, args []string) (*common, error) {
	c := &common{}
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.localConfig, "local-config", "", "local configuration directory")
	fs.BoolVar(&c.debug, "debug", false, "plugins' stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if c.uuid, err = uuidArg(fs); err != nil {
		return nil, err
	}
	if c.podDir, err = os.Getwd(); err != nil {
		return nil, err
	}
	return c, nil
}

func add(args []string) error {
	fs := flag.NewFlagSet("add", flag.ContinueOnError)
	pid := fs.Int("pid", 0, "a process in the pod's network namespace")
	nets := fs.String("net", "", "networks")
	dns := fs.Bool("dns", false, "write the plugins' DNS answer to resolv.conf")
	c, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *pid <= 1 {
		return errors.New("--pid: want the pod's PID 1 as seen from the host")
	}
	reqs, err := network.ParseNetList(*nets)
	if err != nil {
		return err
	}
	ports, err := forwardedPorts(c.podDir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var step func(string)
	if at := os.Getenv(faultEnv); at != "" {
		step = func(s string) {
			if s == at {
				// As if run were SIGKILLed: we and PID 1 die with it.
				_ = unix.Kill(os.Getppid(), unix.SIGKILL)
				time.Sleep(time.Minute)
			}
		}
	}
	return network.Setup(ctx, &network.Params{
		Step:        step,
		PodDir:      c.podDir,
		UUID:        c.uuid,
		Stage1Root:  layout.Stage1RootFS,
		LocalConfig: c.localConfig,
		Nets:        reqs,
		NetnsPid:    *pid,
		DNS:         *dns,
		Ports:       ports,
		Debug:       c.debug,
	})
}

func del(args []string) error {
	c, err := parse(flag.NewFlagSet("del", flag.ContinueOnError), args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return network.Teardown(ctx, c.podDir, layout.Stage1RootFS, c.localConfig, c.uuid, c.debug)
}

func uuidArg(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", errors.New("want the pod's UUID after the flags")
	}
	u, err := types.NewUUID(fs.Arg(0))
	if err != nil {
		return "", fmt.Errorf("UUID %q: %w", fs.Arg(0), err)
	}
	return u.String(), nil
}

// forwardedPorts resolves the pod manifest's host ports (rkt run --port)
// to the apps' ports they name, as rkt's stage1 does
// (common/networking.ForwardedPorts).
func forwardedPorts(podDir string) ([]netinfo.PortMapping, error) {
	d, err := os.Open(podDir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	b, err := safefile.ReadRegularAt(int(d.Fd()), layout.PodManifest, layout.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("pod manifest: %w", err)
	}
	var pm schema.PodManifest
	if err := pm.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("pod manifest: %w", err)
	}
	var out []netinfo.PortMapping
	for _, ep := range pm.Ports {
		pp := ep.PodPort
		if pp == nil {
			for _, ra := range pm.Apps {
				if ra.App == nil {
					continue
				}
				for i := range ra.App.Ports {
					if ra.App.Ports[i].Name == ep.Name {
						pp = &ra.App.Ports[i]
						break
					}
				}
				if pp != nil {
					break
				}
			}
		}
		if pp == nil {
			return nil, fmt.Errorf("port %q: no app declares it", ep.Name)
		}
		if ep.HostPort < 1 || ep.HostPort > 65535 || pp.Port < 1 || pp.Port > 65535 {
			return nil, fmt.Errorf("port %q: %d to %d is out of range", ep.Name, ep.HostPort, pp.Port)
		}
		if pp.Protocol != "tcp" && pp.Protocol != "udp" {
			return nil, fmt.Errorf("port %q: protocol %q (want tcp or udp)", ep.Name, pp.Protocol)
		}
		m := netinfo.PortMapping{HostPort: int(ep.HostPort), ContainerPort: int(pp.Port), Protocol: pp.Protocol}
		if ep.HostIP != nil && !ep.HostIP.IsUnspecified() {
			m.HostIP = ep.HostIP.String()
		}
		for _, o := range out {
			if o.Protocol == m.Protocol && o.HostPort == m.HostPort && (o.HostIP == "" || m.HostIP == "" || o.HostIP == m.HostIP) {
				return nil, fmt.Errorf("port %q: host port %s/%d is forwarded twice", ep.Name, m.Protocol, m.HostPort)
			}
		}
		out = append(out, m)
	}
	return out, nil
}
