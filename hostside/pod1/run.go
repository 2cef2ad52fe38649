package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/hostside/images"
	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/network/netinfo"
)

const runUsage = `usage: pod1 run [flags] IMAGE [app flags] [-- ARGS...] [--- IMAGE [app flags] [-- ARGS...]]...

IMAGE is an ACI file (tar, optionally gzip/bzip2-compressed) or an ACI directory.
App flags follow their image: --name=N --exec=PATH --user=U --group=G
--working-dir=D --set-env=K=V (repeatable) --mount volume=NAME,target=PATH
(repeatable). "--" starts the app's arguments, which run until "---".

flags:`

// cmdRun implements `pod1 run`. On success it does not return: the process
// becomes the stage1, and the pod's exit code is ours.
func cmdRun(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	opts, err := parseRunArgs(g, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, runUsage)
		fs := newRunFlagSet(g, &runFlags{})
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	if err != nil {
		fail(stderr, "pod1 run", err)
		return exitError
	}
	p, err := launch.Prepare(opts)
	if err != nil {
		fail(stderr, "pod1 run", err)
		return exitError
	}
	err = p.Exec()
	// Exec only returns on failure: the pod never ran, so undo it.
	if aerr := launch.Abort(p); aerr != nil {
		err = fmt.Errorf("%w (undo: %w)", err, aerr)
	}
	fail(stderr, "pod1 run", err)
	return exitError
}

// runFlags are the pod-level flags of `pod1 run`.
type runFlags struct {
	stage1      string
	nets        listFlag
	hostname    string
	uuidFile    string
	noOverlay   bool
	interactive bool
	privUsers   string
	volumes     volumeFlag
	ports       portFlag
	dns         listFlag
	dnsSearch   listFlag
	dnsOpt      listFlag
	dnsDomain   string
	env         envFlag
	imageSize   sizeFlag
	imageFiles  int
}

func newRunFlagSet(g *globalFlags, rf *runFlags) *flag.FlagSet {
	fs := newFlagSet("run")
	g.register(fs)
	fs.StringVar(&rf.stage1, "stage1-path", defaultStage1Path(), "stage1 image: ACI file or ACI directory")
	fs.Var(&rf.nets, "net", `networks for the pod, comma-separated, repeatable (default "default")`)
	fs.StringVar(&rf.hostname, "hostname", "", "pod hostname (default rkt-<uuid>, chosen by the stage1)")
	fs.StringVar(&rf.uuidFile, "uuid-file-save", "", "write the pod UUID to this file")
	fs.BoolVar(&rf.noOverlay, "no-overlay", false, "copy image trees instead of mounting overlays")
	fs.BoolVar(&rf.interactive, "interactive", false, "give the (single) app the terminal")
	fs.StringVar(&rf.privUsers, "private-users", "", "BASE:COUNT: run the apps in user namespaces, their ids 0..COUNT-1 the host's BASE onwards (implies --no-overlay)")
	fs.Var(&rf.volumes, "volume", "NAME,kind=host|empty[,source=PATH][,readOnly=BOOL][,mode=M,uid=U,gid=G] (repeatable)")
	fs.Var(&rf.ports, "port", "NAME:[HOSTIP:]HOSTPORT: forward a host port to the app port NAME (repeatable)")
	fs.Var(&rf.dns, "dns", "name server to write in the apps' resolv.conf (repeatable); host: the host's resolv.conf; none: none, not even a network's")
	fs.Var(&rf.dnsSearch, "dns-search", "DNS search domain for the apps' resolv.conf (repeatable)")
	fs.Var(&rf.dnsOpt, "dns-opt", "DNS option for the apps' resolv.conf (repeatable)")
	fs.StringVar(&rf.dnsDomain, "dns-domain", "", "DNS domain for the apps' resolv.conf")
	fs.Var(&rf.imageSize, "image-max-size", "bound on the bytes of files an ACI file unpacks to, with an optional K, M, G or T suffix (default 16G)")
	fs.IntVar(&rf.imageFiles, "image-max-files", 0, "bound on the entries an ACI file unpacks to (default 1048576)")
	fs.Var(&rf.env, "set-env", "K=V set for every app, before each app's own --set-env (repeatable)")
	return fs
}

// parseRunArgs turns `pod1 run` arguments into launch options without
// touching the file system.
func parseRunArgs(g *globalFlags, args []string) (launch.Options, error) {
	return parsePodArgs(g, args, true)
}

// parsePodArgs is parseRunArgs for `pod1 run` (withApps: images follow the
// flags) and `pod1 app sandbox` (flags only).
func parsePodArgs(g *globalFlags, args []string, withApps bool) (launch.Options, error) {
	var rf runFlags
	fs := newRunFlagSet(g, &rf)
	if err := fs.Parse(args); err != nil {
		return launch.Options{}, err
	}
	var apps []launch.AppOptions
	if withApps {
		var err error
		if apps, err = parseApps(g, fs.Args()); err != nil {
			return launch.Options{}, err
		}
	} else if fs.NArg() > 0 {
		return launch.Options{}, fmt.Errorf("unexpected arguments %q: a sandbox starts with no apps (add them with pod1 app add)", fs.Args())
	}
	// rkt's --set-env applies to every app; an app's own value wins.
	for i := range apps {
		apps[i].Env = append(append([]types.EnvironmentVariable(nil), rf.env...), apps[i].Env...)
	}
	if len(rf.nets) > 0 {
		if _, err := netinfo.ParseNetList(rf.nets.String()); err != nil {
			return launch.Options{}, err
		}
	}
	if rf.hostname != "" {
		if err := netinfo.CheckHostname(rf.hostname); err != nil {
			return launch.Options{}, err
		}
	}
	if rf.imageFiles < 0 {
		return launch.Options{}, fmt.Errorf("--image-max-files=%d: want a positive count", rf.imageFiles)
	}
	var users *idmap.Range
	if rf.privUsers != "" {
		u, err := idmap.Parse(rf.privUsers)
		if err != nil {
			return launch.Options{}, fmt.Errorf("--private-users=%q: %w", rf.privUsers, err)
		}
		users = u
	}
	if rf.stage1 == "" {
		return launch.Options{}, errors.New("--stage1-path: not set and no default (cannot locate the pod1 executable)")
	}
	return launch.Options{
		Dir:          g.dir,
		Stage1:       rf.stage1,
		ImageLimits:  images.Limits{MaxBytes: int64(rf.imageSize), MaxEntries: rf.imageFiles},
		Net:          rf.nets.String(),
		Hostname:     rf.hostname,
		Debug:        g.debug,
		Interactive:  rf.interactive,
		NoOverlay:    rf.noOverlay,
		PrivateUsers: users,
		UUIDFileSave: rf.uuidFile,
		Volumes:      rf.volumes,
		Ports:        rf.ports,
		DNS:          launch.DNS{Servers: rf.dns, Search: rf.dnsSearch, Options: rf.dnsOpt, Domain: rf.dnsDomain},
		Apps:         apps,
	}, nil
}

// installedStage1 is where make install puts the stage1 image (the
// Makefile sets it), for a pod1 that was installed rather than run from
// its build tree.
var installedStage1 string

// defaultStage1Path is <dir of the pod1 executable>/../build/stage1.aci
// when it exists, the layout of a build tree (bin/pod1 beside
// build/stage1.aci); otherwise the installed image.
func defaultStage1Path() string {
	exe, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(exe), "..", "build", "stage1.aci")
		if _, serr := os.Stat(p); serr == nil || installedStage1 == "" {
			return p
		}
	}
	return installedStage1
}

// sizeFlag is a byte count with an optional binary suffix (K, M, G, T).
type sizeFlag int64

func (f *sizeFlag) String() string { return strconv.FormatInt(int64(*f), 10) }

func (f *sizeFlag) Set(s string) error {
	mult := int64(1)
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KMGT", s[n-1]&^0x20); i >= 0 {
			mult, s = int64(1)<<(10*(i+1)), s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > math.MaxInt64/mult {
		return errors.New("want a positive byte count, e.g. 512M")
	}
	*f = sizeFlag(v * mult)
	return nil
}

// listFlag is a repeatable flag whose values are joined with commas, like
// rkt's --net=a --net=b (== --net=a,b).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty value")
	}
	*l = append(*l, s)
	return nil
}

// volumeFlag collects --volume values, parsed by appc so the syntax and
// defaults (mode 0755, uid/gid 0 for empty volumes) are rkt's.
type volumeFlag []types.Volume

func (v *volumeFlag) String() string {
	parts := make([]string, len(*v))
	for i, vol := range *v {
		parts[i] = vol.String()
	}
	return strings.Join(parts, " ")
}

func (v *volumeFlag) Set(s string) error {
	vol, err := types.VolumeFromString(s)
	if err != nil {
		return err
	}
	for _, o := range *v {
		if o.Name == vol.Name {
			return fmt.Errorf("duplicate volume name %q", vol.Name)
		}
	}
	*v = append(*v, *vol)
	return nil
}

// portFlag is rkt run's --port=NAME:[HOSTIP:]HOSTPORT, repeatable.
type portFlag []types.ExposedPort

func (p *portFlag) String() string {
	parts := make([]string, len(*p))
	for i, ep := range *p {
		parts[i] = ep.Name.String() + ":" + strconv.Itoa(int(ep.HostPort))
	}
	return strings.Join(parts, ",")
}

func (p *portFlag) Set(s string) error {
	fields := strings.Split(s, ":")
	if len(fields) < 2 || len(fields) > 3 {
		return fmt.Errorf("%q: want NAME:[HOSTIP:]HOSTPORT", s)
	}
	name, err := types.NewACName(fields[0])
	if err != nil {
		return fmt.Errorf("%q: port name: %w", s, err)
	}
	ep := types.ExposedPort{Name: *name}
	if len(fields) == 3 {
		if ep.HostIP = net.ParseIP(fields[1]); ep.HostIP == nil {
			return fmt.Errorf("%q: host IP %q is not an address", s, fields[1])
		}
	}
	hp, err := strconv.Atoi(fields[len(fields)-1])
	if err != nil || hp < 1 || hp > 65535 {
		return fmt.Errorf("%q: host port %q: want 1-65535", s, fields[len(fields)-1])
	}
	ep.HostPort = uint(hp)
	*p = append(*p, ep)
	return nil
}
