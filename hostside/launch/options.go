// Package launch does what rkt v1.30.0's stage0 does for `rkt run`: it turns
// a set of ACI images and command-line overrides into a pod directory laid
// out exactly as a stage1 expects (pods/run/<uuid> with the pod manifest,
// stage1 and app trees, overlay mounts, the flock'd lock fd) and then execs
// the stage1's run entrypoint with rkt's argv and environment. Its callers
// are the pod1 CLI and tests; nothing here knows about flags.
package launch

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/hostside/images"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
)

// Defaults are rkt's, so a pod prepared by pod1 looks like one prepared by
// `rkt run` to every other tool.
const (
	// DefaultDir is rkt's default data directory (--dir).
	DefaultDir = "/var/lib/rkt"
	// DefaultNet is passed as --net when no network is requested.
	DefaultNet = "default"
	// DefaultLocalConfig is rkt's default --local-config directory.
	DefaultLocalConfig = "/etc/rkt"
	// RktVersion is written as the pod manifest's acVersion, as rkt
	// v1.30.0 writes its own version there.
	RktVersion = "1.30.0"
)

// Options describes one pod to prepare.
type Options struct {
	// Dir is the data directory; pods go to Dir/pods and unpacked ACI
	// files to Dir/pod1/images. Empty means DefaultDir.
	Dir string
	// Stage1 is the stage1 image: an ACI file or an ACI directory.
	Stage1 string
	// ImageLimits bound what an ACI file may unpack to (zero fields:
	// images.DefaultLimits).
	ImageLimits images.Limits
	// Net is the --net value handed to the stage1 (comma list); empty
	// means DefaultNet.
	Net string
	// Hostname, if set, is passed as --hostname (stage1 interface >= 2).
	Hostname string
	// LocalConfig is passed as --local-config; empty means
	// DefaultLocalConfig.
	LocalConfig string
	// Debug passes --debug to the stage1 and makes Prepare log its steps.
	Debug bool
	// Interactive passes --interactive; only one app is then allowed.
	Interactive bool
	// NoOverlay copies image trees into the pod instead of mounting
	// overlays over them.
	NoOverlay bool
	// PrivateUsers passes --private-users: the image trees are copied
	// with their owners shifted into the range, as rkt's stage0 does
	// (which is why it implies NoOverlay).
	PrivateUsers *idmap.Range
	// UUIDFileSave, if set, receives the pod UUID (written atomically).
	UUIDFileSave string
	// Volumes become the pod manifest's volumes.
	Volumes []types.Volume
	// Ports are host ports forwarded to the apps' named ports (rkt run
	// --port), the pod manifest's ports.
	Ports []types.ExposedPort
	// DNS is rkt run's --dns flags: stage0 writes the apps' resolv.conf
	// or tells the stage1 which one to use (--dns-conf-mode).
	DNS DNS
	// Apps are the pod's apps, in order.
	Apps []AppOptions
	// Mutable prepares a sandbox (rkt app sandbox): apps may be none,
	// and more are added to the running pod with the app operations;
	// the stage1 gets --mutable.
	Mutable bool
}

// AppOptions describes one app: its image and rkt's per-app overrides.
type AppOptions struct {
	// Image is an ACI file or an ACI directory.
	Image string
	// Name overrides the app name derived from the image name.
	Name string
	// Exec replaces the image's exec (its first element and arguments).
	Exec string
	// Args are appended to the exec, after Exec's replacement if any.
	Args []string
	// User, Group and WorkingDir override the image's values when set.
	User, Group, WorkingDir string
	// Env is applied in order on top of the image's environment.
	Env []types.EnvironmentVariable
	// Mounts map pod volumes into this app.
	Mounts []schema.Mount
	// Annotations become the app's annotations in the pod manifest
	// (pod1's supervision settings: docs/supervision.md).
	Annotations types.Annotations
}

// withDefaults returns a copy of o with empty fields defaulted and the data
// dir made absolute: the pod path ends up in argv[0] and in the stage1's
// cwd, and pod1 chdirs before exec.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, fmt.Errorf("--dir %q: %w", o.Dir, err)
	}
	o.Dir = dir
	if o.Net == "" {
		o.Net = DefaultNet
	}
	if o.LocalConfig == "" {
		o.LocalConfig = DefaultLocalConfig
	}
	if o.PrivateUsers != nil {
		o.NoOverlay = true
	}
	if o.Stage1 == "" {
		return o, fmt.Errorf("--stage1-path: %w", ErrNoStage1)
	}
	if _, err := o.DNS.resolvMode(); err != nil {
		return o, err
	}
	if len(o.Apps) == 0 && !o.Mutable {
		return o, ErrNoApps
	}
	// rkt refuses this too: one terminal cannot be shared by several apps.
	if o.Interactive && len(o.Apps) > 1 {
		return o, fmt.Errorf("--interactive: %w", ErrInteractiveApps)
	}
	return o, nil
}

// storeDir is where unpacked ACI files live. It is pod1's own, not rkt's
// CAS, since pod1 does not implement rkt's store database.
func (o Options) storeDir() string { return filepath.Join(o.Dir, layout.ImageStoreDir) }

func (o Options) debugf(format string, args ...any) {
	if o.Debug {
		logx.Logf(logx.LevelDebug, format, args...)
	}
}

// AppName derives an app name from an image name as rkt does
// (stage0 imageNameToAppName): the last path component, sanitised into an
// ACName, so "example.com/My_App" runs as "my-app".
func AppName(imageName string) (types.ACName, error) {
	parts := strings.Split(imageName, "/")
	s, err := types.SanitizeACName(parts[len(parts)-1])
	if err != nil {
		return "", fmt.Errorf("derive app name from image name %q: %w", imageName, err)
	}
	n, err := types.NewACName(s)
	if err != nil {
		return "", fmt.Errorf("derive app name from image name %q: %w", imageName, err)
	}
	return *n, nil
}

// checkNames refuses duplicate app names and names that collide with
// another app's status markers: rkt keeps <app>, <app>-created and
// <app>-started in one rkt/status directory, so apps "web" and
// "web-created" would overwrite each other's state.
func checkNames(names []types.ACName) error {
	seen := make(map[types.ACName]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return fmt.Errorf("app %q: %w", n, ErrDuplicateApp)
		}
		seen[n] = true
	}
	for _, n := range names {
		for _, suffix := range layout.MarkerSuffixes() {
			base, ok := strings.CutSuffix(string(n), suffix)
			if ok && seen[types.ACName(base)] {
				return fmt.Errorf("app %q: %w %q", n, ErrNameCollision, base)
			}
		}
	}
	return nil
}
