package podspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/layout"
)

// checkIsolators validates the isolators of every app a manifest (a pod
// manifest's apps[].app or an image manifest's app) carries, from its raw
// bytes, before appc's decoder rejects them with a message naming neither
// the app nor the bound. Pod-level isolators are refused: only per-app
// ones are applied (as by rkt's stage1), and skipping those silently would
// run the apps without the isolation they ask for.
func checkIsolators(raw []byte, image string) error {
	type app struct {
		Isolators []rawIsolator `json:"isolators"`
	}
	var m struct {
		Apps []struct {
			Name string `json:"name"`
			App  *app   `json:"app"`
		} `json:"apps"`
		App       *app          `json:"app"`
		Isolators []rawIsolator `json:"isolators"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil // the manifest's decoder reports it
	}
	if image != "" {
		if m.App == nil {
			return nil
		}
		_, err := parseIsolators(m.App.Isolators)
		return wrapField(fmt.Sprintf("app %q: image manifest", image), err)
	}
	if len(m.Isolators) > 0 {
		return errorf("pod manifest: isolators", "pod-level isolators are not supported; give them to each app")
	}
	for _, a := range m.Apps {
		if a.App != nil {
			if _, err := parseIsolators(a.App.Isolators); err != nil {
				return wrapField(fmt.Sprintf("app %q", a.Name), err)
			}
		}
	}
	return nil
}

func wrapField(field string, err error) error {
	if err == nil {
		return nil
	}
	return &fieldError{field: field, err: err}
}

// resolveIsolation parses the isolators of the app as loaded and puts
// them on its spec; it returns the app's resource limits.
func resolveIsolation(app *types.App, readOnlyRoot bool, spec *appexec.Spec, opts *Options) (cgroups.Limits, error) {
	// An app that runs /proc/self/exe (or anything under /proc) runs the
	// stage1's own binary, which it could then rewrite through
	// /proc/PID/exe once it stops (CVE-2019-5736, threats T3, B10).
	if e := path.Clean(spec.Exec[0]); e == "/proc" || strings.HasPrefix(e, "/proc/") {
		return cgroups.Limits{}, fmt.Errorf("exec: %s is under /proc: an app may not run the stage1's binary", spec.Exec[0])
	}
	is, err := isolate(app, readOnlyRoot, spec, opts)
	if err != nil {
		return cgroups.Limits{}, err
	}
	return is.limits, pinSources(spec)
}

// isolate parses the app's isolators and puts them on spec.
func isolate(app *types.App, readOnlyRoot bool, spec *appexec.Spec, opts *Options) (*isolation, error) {
	list := make([]rawIsolator, 0, len(app.Isolators))
	for _, i := range app.Isolators {
		list = append(list, rawIsolator{Name: i.Name.String(), Value: i.ValueRaw})
	}
	is, err := parseIsolators(list)
	if err != nil {
		return nil, err
	}
	if err := is.apply(spec, readOnlyRoot, opts); err != nil {
		return nil, err
	}
	return is, nil
}

// pinSources records the identity of each volume's source as it is now,
// before any app of the pod runs: the app's process refuses a source that
// has been swapped since (appexec's openSource). A source that does not
// exist yet is an empty volume, which the stage1 makes in the pod
// directory, out of every app's reach.
func pinSources(spec *appexec.Spec) error {
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if m.Kind != appexec.KindBind || m.Optional {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("volume source %s: %w", m.Source, err)
		}
		m.SourceDev, m.SourceIno = st.Dev, st.Ino
	}
	return nil
}

// Trusted is what an entry point that makes a process like the app's
// (enter) takes from AppTrusted.
type Trusted struct {
	Isolation appexec.Isolation
	// UserNS is the pod's user namespace (--private-users), nil if none.
	UserNS *idmap.Range
	// UID, GID and Groups are the app's user, resolved as at its start.
	UID, GID int
	Groups   []int
}

// AppTrusted resolves the isolation of the pod's app name, its user
// namespace and its user from what only stage0 and the run entry point
// wrote: the pod manifest, the image manifest stage0 rendered beside the
// app's rootfs, and the run's options (the user's name is looked up in
// the app's own tree, as at its start). enter takes them from here, never
// from a file that PID 1 or an app could have written: a saved spec
// rewritten to ask for every capability and no filter is just ignored.
func AppTrusted(podDir string, opts *Options, name string) (*Trusted, error) {
	pm, err := readManifest(podDir)
	if err != nil {
		return nil, err
	}
	ra, err := runtimeApp(pm, name)
	if err != nil {
		return nil, err
	}
	field := func(f string) string { return fmt.Sprintf("app %q: %s", name, f) }
	app, _, err := appOf(podDir, ra)
	if err != nil {
		return nil, err
	}
	var s appexec.Spec
	if _, err := isolate(app, ra.ReadOnlyRootFS, &s, opts); err != nil {
		return nil, wrapField(fmt.Sprintf("app %q", name), err)
	}
	tr := &Trusted{Isolation: s.Isolation, Groups: append([]int{}, app.SupplementaryGIDs...)}
	if u := opts.PrivateUsers; u != nil {
		tr.UserNS = &idmap.Range{HostID: u.HostID, Size: u.Size}
	}
	rootfs := filepath.Join(podDir, layout.AppRootfs(name))
	if tr.UID, tr.GID, err = resolveIDs(rootfs, app, opts, field); err != nil {
		return nil, err
	}
	return tr, nil
}
