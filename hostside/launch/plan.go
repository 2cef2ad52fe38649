package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/hostside/entrypoint"
	"github.com/pod1/pod1/hostside/images"
	"github.com/pod1/pod1/layout"
)

// plan is everything decided before the pod directory exists: images are
// opened (ACI files unpacked), names and overrides checked, and the pod
// manifest built, so that bad input never leaves a pod behind.
type plan struct {
	stage1     *images.Image
	entrypoint string // run annotation, cleaned, relative to stage1 rootfs
	version    int    // stage1 interface version
	apps       []plannedApp
	manifest   []byte // pod manifest JSON, already validated
	pm         *schema.PodManifest
}

type plannedApp struct {
	name types.ACName
	img  *images.Image
}

func makePlan(o Options) (*plan, error) {
	s1, err := images.OpenLimited(o.Stage1, o.storeDir(), o.ImageLimits)
	if err != nil {
		return nil, fmt.Errorf("stage1: %w", err)
	}
	entry, version, err := stage1Entry(s1)
	if err != nil {
		return nil, fmt.Errorf("stage1 image %s: %w", o.Stage1, err)
	}
	pl := &plan{stage1: s1, entrypoint: entry, version: version}

	pm := schema.BlankPodManifest()
	v, err := types.NewSemVer(RktVersion)
	if err != nil {
		return nil, fmt.Errorf("acVersion %q: %w", RktVersion, err)
	}
	pm.ACVersion = *v
	pm.Apps = schema.AppList{}
	pm.Volumes = o.Volumes
	// rkt writes an empty (not null) ports list; stage1s may index it.
	pm.Ports = append([]types.ExposedPort{}, o.Ports...)
	pm.Annotations = types.Annotations{{Name: layout.AnnMutable, Value: strconv.FormatBool(o.Mutable)}}

	volumes := make(map[types.ACName]bool, len(o.Volumes))
	for _, vol := range o.Volumes {
		if volumes[vol.Name] {
			return nil, fmt.Errorf("--volume %s: duplicate volume name", vol.Name)
		}
		volumes[vol.Name] = true
	}

	names := make([]types.ACName, 0, len(o.Apps))
	for i, a := range o.Apps {
		img, err := images.OpenLimited(a.Image, o.storeDir(), o.ImageLimits)
		if err != nil {
			return nil, fmt.Errorf("app %d: %w", i+1, err)
		}
		if err := img.CheckApp(); err != nil {
			return nil, fmt.Errorf("app %d: %w", i+1, err)
		}
		name, err := appName(a, img)
		if err != nil {
			return nil, fmt.Errorf("app %d (image %s): %w", i+1, a.Image, err)
		}
		for _, m := range a.Mounts {
			if !volumes[m.Volume] {
				return nil, fmt.Errorf("app %q: --mount volume=%s: %w", name, m.Volume, ErrUnknownVolume)
			}
		}
		ra, err := runtimeApp(name, img, a)
		if err != nil {
			return nil, fmt.Errorf("app %q: %w", name, err)
		}
		names = append(names, name)
		pm.Apps = append(pm.Apps, ra)
		pl.apps = append(pl.apps, plannedApp{name: name, img: img})
	}
	if err := checkNames(names); err != nil {
		return nil, err
	}
	if err := checkPorts(pm); err != nil {
		return nil, err
	}

	// Marshalling runs appc's validation (names, env identifiers, volume
	// kinds, working directory), so what reaches disk is a manifest the
	// stage1's own parser accepts.
	raw, err := json.Marshal(pm)
	if err != nil {
		return nil, fmt.Errorf("pod manifest: %w", err)
	}
	pl.manifest, pl.pm = raw, pm
	return pl, nil
}

// stage1Entry reads the run entry point and the interface version the
// stage1 image declares, and resolves the entry point in the image's
// rootfs: a stage1 whose run leads out of its tree is refused here,
// before the pod directory exists.
func stage1Entry(s1 *images.Image) (string, int, error) {
	ann := make(map[string]string, len(s1.Manifest.Annotations))
	for _, a := range s1.Manifest.Annotations {
		ann[a.Name.String()] = a.Value
	}
	decl := entrypoint.New(ann)
	run, err := decl.Path(layout.AnnRun)
	if errors.Is(err, entrypoint.ErrNotDeclared) {
		return "", 0, ErrNoEntrypoint
	}
	if err != nil {
		return "", 0, err
	}
	version, err := decl.Version()
	if err != nil {
		return "", 0, err
	}
	if _, err := entrypoint.In(s1.Rootfs(), run); err != nil {
		return "", 0, fmt.Errorf("run entrypoint %s: %w", run, err)
	}
	return run, version, nil
}

func appName(a AppOptions, img *images.Image) (types.ACName, error) {
	if a.Name == "" {
		return AppName(img.Manifest.Name.String())
	}
	n, err := types.NewACName(a.Name)
	if err != nil {
		return "", fmt.Errorf("--name %q: %w", a.Name, err)
	}
	return *n, nil
}

// runtimeApp builds the pod manifest entry the way rkt's
// generatePodManifest does: the image's app section with the command-line
// overrides applied on a copy (the image manifest itself is written to the
// pod verbatim).
func runtimeApp(name types.ACName, img *images.Image, a AppOptions) (schema.RuntimeApp, error) {
	am := img.Manifest
	var app *types.App
	if am.App != nil {
		c, err := copyApp(am.App)
		if err != nil {
			return schema.RuntimeApp{}, err
		}
		app = c
	} else {
		// rkt's minimal app section for images without one.
		app = &types.App{User: "0", Group: "0"}
	}
	if a.Exec != "" {
		app.Exec = types.Exec{a.Exec}
	}
	app.Exec = append(app.Exec, a.Args...)
	if len(app.Exec) == 0 {
		return schema.RuntimeApp{}, fmt.Errorf("image %s: %w", img.Source, ErrNoExec)
	}
	if a.WorkingDir != "" {
		app.WorkingDirectory = a.WorkingDir
	}
	if a.User != "" {
		app.User = a.User
	}
	if a.Group != "" {
		app.Group = a.Group
	}
	for _, e := range a.Env {
		app.Environment.Set(e.Name, e.Value)
	}
	imgName := am.Name
	return schema.RuntimeApp{
		Name: name,
		Image: schema.RuntimeImage{
			Name:   &imgName,
			ID:     img.ID,
			Labels: am.Labels,
		},
		App:         app,
		Mounts:      a.Mounts,
		Annotations: a.Annotations,
	}, nil
}

// copyApp deep-copies an app section through JSON, so overrides never alias
// slices shared with the parsed image manifest.
func copyApp(a *types.App) (*types.App, error) {
	raw, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("copy app section: %w", err)
	}
	var c types.App
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("copy app section: %w", err)
	}
	return &c, nil
}

// checkPorts refuses a forwarded port no app declares, or a host port
// forwarded twice, as rkt's stage0 does (commonnet.ForwardedPorts).
func checkPorts(pm *schema.PodManifest) error {
	seen := map[string]types.ACName{}
	for _, ep := range pm.Ports {
		var proto string
		for _, ra := range pm.Apps {
			if ra.App == nil {
				continue
			}
			for _, p := range ra.App.Ports {
				if p.Name == ep.Name {
					proto = p.Protocol
				}
			}
		}
		if proto == "" {
			return fmt.Errorf("--port %s: no app declares a port named %s", ep.Name, ep.Name)
		}
		if ep.HostPort < 1 || ep.HostPort > 65535 {
			return fmt.Errorf("--port %s: host port %d out of range", ep.Name, ep.HostPort)
		}
		key := proto + "/" + strconv.Itoa(int(ep.HostPort))
		if other, dup := seen[key]; dup {
			return fmt.Errorf("--port %s: host port %s is forwarded to %s already", ep.Name, key, other)
		}
		seen[key] = ep.Name
	}
	return nil
}
