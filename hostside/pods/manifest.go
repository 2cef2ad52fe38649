package pods

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/appc/spec/schema/types"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// podManifest is the part of the pod manifest the host tools show. It is
// decoded without appc's full validation, which would cost more than the
// rest of a list of a thousand pods; names used as file names are still
// checked (checkName).
type podManifest struct {
	Apps []struct {
		Name  string `json:"name"`
		Image struct {
			ID string `json:"id"`
		} `json:"image"`
		App *struct {
			UserAnnotations map[string]string `json:"userAnnotations"`
			UserLabels      map[string]string `json:"userLabels"`
		} `json:"app"`
		Mounts []struct {
			Volume    string `json:"volume"`
			Path      string `json:"path"`
			AppVolume *struct {
				Source   string `json:"source"`
				ReadOnly *bool  `json:"readOnly"`
			} `json:"appVolume"`
		} `json:"mounts"`
	} `json:"apps"`
	Volumes []struct {
		Name     string `json:"name"`
		Source   string `json:"source"`
		ReadOnly *bool  `json:"readOnly"`
	} `json:"volumes"`
	Annotations []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"annotations"`
	UserAnnotations map[string]string `json:"userAnnotations"`
	UserLabels      map[string]string `json:"userLabels"`
}

// errBadAppName is a manifest app name that is not an ACName: it would
// name files outside the status directory.
var errBadAppName = errors.New("app name is not an ACName")

func checkName(name string) error {
	if _, err := types.NewACName(name); err != nil {
		return fmt.Errorf("%w: %q", errBadAppName, name)
	}
	return nil
}

func (p *Pod) readManifest(d *podDir, detail Detail) error {
	b, err := d.read(layout.PodManifest)
	if err != nil {
		return fmt.Errorf("read pod manifest: %w", err)
	}
	if detail == Summary {
		ma, ok := d.m.apps[string(b)]
		if !ok {
			ma.apps, ma.err = summaryApps(b)
			if memoable(d.m.apps, b) {
				if d.m.apps == nil {
					d.m.apps = map[string]memoApps{}
				}
				d.m.apps[string(b)] = ma
			}
		}
		// Apps before a refused name are shown, as a full read
		// shows them.
		for _, a := range ma.apps {
			p.Apps = append(p.Apps, App{Name: a.name, ImageID: a.imageID, ImageName: imageName(d, a.name)})
		}
		return ma.err
	}
	var m podManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("decode pod manifest: %w", err)
	}
	for _, a := range m.Annotations {
		if a.Name == layout.AnnMutable && a.Value == "true" {
			p.Mutable = true
		}
	}
	p.UserAnnotations, p.UserLabels = m.UserAnnotations, m.UserLabels
	vols := map[string]int{}
	for i, v := range m.Volumes {
		vols[v.Name] = i
	}
	for _, ma := range m.Apps {
		if err := checkName(ma.Name); err != nil {
			return err
		}
		a := App{Name: ma.Name, ImageID: ma.Image.ID}
		if ma.App != nil {
			a.UserAnnotations, a.UserLabels = ma.App.UserAnnotations, ma.App.UserLabels
		}
		for _, mnt := range ma.Mounts {
			out := Mount{Name: mnt.Volume, ContainerPath: mnt.Path}
			var ro *bool
			if av := mnt.AppVolume; av != nil {
				out.HostPath, ro = av.Source, av.ReadOnly
			} else if i, ok := vols[mnt.Volume]; ok {
				out.HostPath, ro = m.Volumes[i].Source, m.Volumes[i].ReadOnly
			}
			out.ReadOnly = ro != nil && *ro
			a.Mounts = append(a.Mounts, out)
		}
		a.ImageName = imageName(d, ma.Name)
		p.Apps = append(p.Apps, a)
	}
	sd := fdPath(d.fd, p.statusDir)
	for i := range p.Apps {
		a := &p.Apps[i]
		if r, err := status.ReadRecord(sd, a.Name); err == nil {
			a.Record = r
		}
		if p.Mutable {
			p.mutableAppState(d, a)
		} else {
			p.immutableAppState(a, sd)
		}
	}
	return nil
}

// appRef is what Summary keeps of a pod manifest's app.
type appRef struct{ name, imageID string }

// summaryApps decodes the pod manifest as readManifest does and keeps the
// apps' names and image IDs, up to the first name it refuses.
func summaryApps(b []byte) ([]appRef, error) {
	var m podManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode pod manifest: %w", err)
	}
	apps := make([]appRef, 0, len(m.Apps))
	for _, ma := range m.Apps {
		if err := checkName(ma.Name); err != nil {
			return apps, err
		}
		apps = append(apps, appRef{ma.Name, ma.Image.ID})
	}
	return apps, nil
}

// imageName is the app image's name[:version] from
// appsinfo/<app>/manifest (rkt list's getImageName).
func imageName(d *podDir, app string) string {
	b, err := d.read(layout.AppInfoDir(app) + "/manifest")
	if err != nil {
		return ""
	}
	if n, ok := d.m.images[string(b)]; ok {
		return n
	}
	n := decodeImageName(b)
	if memoable(d.m.images, b) {
		if d.m.images == nil {
			d.m.images = map[string]string{}
		}
		d.m.images[string(b)] = n
	}
	return n
}

func decodeImageName(b []byte) string {
	var im struct {
		Name   string `json:"name"`
		Labels []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"labels"`
	}
	if json.Unmarshal(b, &im) != nil {
		return ""
	}
	for _, l := range im.Labels {
		if l.Name == "version" {
			return im.Name + ":" + l.Value
		}
	}
	return im.Name
}

// immutableAppState is rkt's appStateInImmutablePod: every app lives and
// dies with the pod, so its times are the pod's, and a status file means
// it exited.
func (p *Pod) immutableAppState(a *App, statusDir string) {
	a.State = appStateFromPod(p.State)
	a.CreatedAt, a.StartedAt, a.FinishedAt = timePtr(p.Created), timePtr(p.Started), timePtr(p.GCMarked)
	if code, err := status.Read(statusDir, a.Name); err == nil {
		a.State, a.ExitCode = AppExited, &code
	}
}

// mutableAppState is rkt's appStateInMutablePod: stage0's -created and
// -started markers and the status file, by their mtimes.
func (p *Pod) mutableAppState(d *podDir, a *App) {
	a.State = AppUnknown
	defer func() {
		// A pod killed hard leaves apps without status: they are over
		// all the same, as of when gc marked the pod.
		if p.IsAfterRun() && a.State != AppExited {
			a.State, a.FinishedAt = AppExited, timePtr(p.GCMarked)
		}
	}()
	base := p.statusDir + "/" + a.Name
	if a.CreatedAt = timePtr(d.mtime(base + layout.CreatedSuffix)); a.CreatedAt == nil {
		return
	}
	a.State = AppCreated
	if a.StartedAt = timePtr(d.mtime(base + layout.StartedSuffix)); a.StartedAt == nil {
		return
	}
	a.State = AppRunning
	if a.FinishedAt = timePtr(d.mtime(base)); a.FinishedAt == nil {
		return
	}
	a.State = AppExited
	code, err := status.Read(fdPath(d.fd, p.statusDir), a.Name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		// rkt: an unreadable status of an exited app reads as failure.
		code = 1
	}
	a.ExitCode = &code
}

func appStateFromPod(s State) AppState {
	switch s {
	case Prepared:
		return AppCreated
	case Running:
		return AppRunning
	case Deleting, ExitedDeleting, Exited, ExitedGarbage, Garbage:
		return AppExited
	}
	return AppUnknown
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// readNetworks reads net-info.json; a missing or broken file reads as no
// networks (rkt: ENOENT means the pod uses the host's network).
func readNetworks(d *podDir) []Network {
	b, err := d.read(layout.NetInfo)
	if err != nil {
		return nil
	}
	var raw []json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		return nil
	}
	nets := make([]Network, 0, len(raw))
	for _, r := range raw {
		var n struct {
			NetName string `json:"netName"`
			IP      string `json:"ip"`
		}
		_ = json.Unmarshal(r, &n)
		nets = append(nets, Network{Name: n.NetName, IP: n.IP, Raw: r})
	}
	return nets
}
