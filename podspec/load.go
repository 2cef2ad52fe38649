package podspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"
	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// Load reads and validates the pod in podDir (an absolute path) and
// resolves it for the stage1. Nothing on disk is changed.
func Load(podDir string, opts *Options) (*Pod, error) {
	pm, err := readManifest(podDir)
	if err != nil {
		return nil, err
	}
	if len(pm.Apps) == 0 && !opts.Mutable {
		return nil, errorf("pod manifest: apps", "pod must contain at least one application")
	}
	if opts.Interactive && len(pm.Apps) != 1 {
		return nil, errorf("--interactive", "the pod has %d apps; an interactive pod has exactly one", len(pm.Apps))
	}
	criDir, criFormat, err := criLogs(pm.Annotations)
	if err != nil {
		return nil, errorf("pod manifest: annotations", "%w", err)
	}
	raw, err := consoleRaw(pm.Annotations)
	if err != nil {
		return nil, errorf("pod manifest: annotations", "%w", err)
	}
	machinedAs, err := machinedMode(pm.Annotations)
	if err != nil {
		return nil, errorf("pod manifest: annotations", "%w", err)
	}
	podJournal, err := podJournalMode(pm.Annotations)
	if err != nil {
		return nil, errorf("pod manifest: annotations", "%w", err)
	}
	vols, shared, err := loadVolumes(podDir, pm.Volumes, opts.PrivateUsers)
	if err != nil {
		return nil, err
	}
	p := &Pod{
		UUID:         opts.UUID,
		Hostname:     opts.Hostname,
		NewNet:       !opts.NetHost(),
		PrivateUsers: opts.PrivateUsers != nil,
		Mutable:      opts.Mutable,
		Interactive:  opts.Interactive,
		Console:      opts.Interactive && opts.Console,
		AllDevices:   opts.DisablePaths,
		GracePeriod:  DefaultGracePeriod,
		EmptyVolumes: shared,
		CRIDir:       criDir,
		CRIFormat:    criFormat,
		ConsoleRaw:   raw,
		Machined:     machinedAs,
		PodJournal:   podJournal,
	}
	if p.Hostname == "" {
		p.Hostname = "rkt-" + opts.UUID
	}
	for _, v := range vols {
		if v.Kind == "host" {
			p.VolumeSources = append(p.VolumeSources, VolumeSource{Path: v.source, File: v.file})
		}
	}
	sort.Slice(p.VolumeSources, func(i, j int) bool { return p.VolumeSources[i].Path < p.VolumeSources[j].Path })
	names := map[string]bool{}
	for i := range pm.Apps {
		app, err := loadApp(podDir, opts, &pm.Apps[i], vols, criDir != "")
		if err != nil {
			return nil, err
		}
		p.Apps = append(p.Apps, *app)
		p.EmptyVolumes = append(p.EmptyVolumes, app.EmptyVolumes...)
		names[app.Spec.Name] = true
	}
	hostPorts(p.Apps, pm.Ports)
	if p.ExitPolicy, p.MainApp, err = exitPolicy(pm.Annotations, names); err != nil {
		return nil, errorf("pod manifest: annotations", "%w", err)
	}
	if p.PidsMax, err = podPidsMax(pm.Annotations); err != nil {
		return nil, errorf("pod manifest: annotations", "%w", err)
	}
	if p.ShmSize, err = shmSize(pm.Annotations); err != nil {
		return nil, errorf("pod manifest: annotations", "%w", err)
	}
	return p, nil
}

func readManifest(podDir string) (*schema.PodManifest, error) {
	raw, err := readCapped(podDir, layout.PodManifest)
	if err != nil {
		return nil, errorf("pod manifest", "%w", err)
	}
	if err := checkAppNames(raw); err != nil {
		return nil, err
	}
	if err := checkIsolators(raw, ""); err != nil {
		return nil, err
	}
	var pm schema.PodManifest
	if err := pm.UnmarshalJSON(raw); err != nil {
		return nil, errorf("pod manifest", "%s", oneLine(err))
	}
	return &pm, nil
}

// AppNames lists the apps of the pod manifest in podDir.
func AppNames(podDir string) ([]string, error) {
	pm, err := readManifest(podDir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(pm.Apps))
	for _, a := range pm.Apps {
		names = append(names, a.Name.String())
	}
	return names, nil
}

// runtimeApp is the pod manifest's app name, or one line saying why not.
func runtimeApp(pm *schema.PodManifest, name string) (*schema.RuntimeApp, error) {
	an, err := types.NewACName(name)
	if err != nil {
		return nil, errorf("--app", "invalid app name %q: %v", name, err)
	}
	ra := pm.Apps.Get(*an)
	if ra == nil {
		return nil, errorf("--app", "the pod manifest has no app %q", name)
	}
	return ra, nil
}

// LoadApp reads and validates one app of the pod in podDir, as stage0
// left it for `app add`: the pod manifest already lists it. It also
// returns the pod's empty volumes, which must exist before it starts.
func LoadApp(podDir string, opts *Options, name string) (*App, []SharedVolume, error) {
	pm, err := readManifest(podDir)
	if err != nil {
		return nil, nil, err
	}
	ra, err := runtimeApp(pm, name)
	if err != nil {
		return nil, nil, err
	}
	vols, shared, err := loadVolumes(podDir, pm.Volumes, opts.PrivateUsers)
	if err != nil {
		return nil, nil, err
	}
	criDir, _, err := criLogs(pm.Annotations)
	if err != nil {
		return nil, nil, errorf("pod manifest: annotations", "%w", err)
	}
	app, err := loadApp(podDir, opts, ra, vols, criDir != "")
	if err != nil {
		return nil, nil, err
	}
	return app, append(shared, app.EmptyVolumes...), nil
}

// readCapped reads a manifest of the pod directory: without following a
// symlink, without blocking on a FIFO, only a regular file and at most
// layout.MaxFileSize bytes of it.
func readCapped(podDir, rel string) ([]byte, error) {
	b, err := safefile.ReadRegularIn(podDir, rel, layout.MaxFileSize)
	if errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("%s exceeds %d bytes", rel, layout.MaxFileSize)
	}
	return b, err
}

// oneLine folds the multi-line messages of appc's JSON errors.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// checkAppNames validates the app names before appc's decoder does, so the
// error can say which entry is wrong, and adds the checks appc lacks:
// collisions with stage0's marker files (threats B5, T15).
func checkAppNames(raw []byte) error {
	var pre struct {
		Apps []struct {
			Name *string `json:"name"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(raw, &pre); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return errorf("pod manifest", "invalid JSON at byte %d: %v", se.Offset, err)
		}
		return errorf("pod manifest", "%v", err)
	}
	seen := map[string]int{}
	for i, a := range pre.Apps {
		field := fmt.Sprintf("pod manifest: apps[%d].name", i)
		if a.Name == nil {
			return errorf(field, "missing")
		}
		name := *a.Name
		if _, err := types.NewACName(name); err != nil {
			return errorf(field, "invalid app name %q: %v", name, err)
		}
		if j, dup := seen[name]; dup {
			return errorf(field, "duplicate app name %q (also apps[%d])", name, j)
		}
		seen[name] = i
	}
	for name := range seen {
		for _, suf := range layout.MarkerSuffixes() {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if _, clash := seen[base]; clash {
					return errorf("pod manifest: apps", "app name %q collides with status marker of app %q", name, base)
				}
			}
		}
	}
	return nil
}

// appOf reads the image manifest stage0 rendered beside the app's rootfs
// (a pod without it was not prepared completely) and returns the app
// section the app runs: the pod manifest's, or, as rkt's LoadPod falls
// back to it, the image's own.
func appOf(podDir string, ra *schema.RuntimeApp) (*types.App, *schema.ImageManifest, error) {
	name := ra.Name.String()
	field := func(f string) string { return fmt.Sprintf("app %q: %s", name, f) }
	raw, err := readCapped(podDir, layout.AppManifest(name))
	if err != nil {
		return nil, nil, errorf(field("image manifest"), "%w", err)
	}
	if err := checkIsolators(raw, name); err != nil {
		return nil, nil, err
	}
	var im schema.ImageManifest
	if err := im.UnmarshalJSON(raw); err != nil {
		return nil, nil, errorf(field("image manifest"), "%s", oneLine(err))
	}
	app := ra.App
	if app == nil {
		if im.App == nil {
			return nil, nil, errorf(field("app"), "neither the pod manifest nor the image manifest has an app section")
		}
		app = im.App
	}
	return app, &im, nil
}

func loadApp(podDir string, opts *Options, ra *schema.RuntimeApp, vols map[types.ACName]volume, k8sLogs bool) (*App, error) {
	name := ra.Name.String()
	field := func(f string) string { return fmt.Sprintf("app %q: %s", name, f) }
	appDir := filepath.Join(podDir, layout.AppDir(name))
	app, im, err := appOf(podDir, ra)
	if err != nil {
		return nil, err
	}
	if len(app.Exec) == 0 || app.Exec[0] == "" {
		return nil, errorf(field("exec"), "must not be empty")
	}
	for i, a := range app.Exec {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, errorf(field(fmt.Sprintf("exec[%d]", i)), "contains a NUL byte")
		}
	}
	rootfs := filepath.Join(appDir, layout.RootfsName)
	if err := checkRootFS(rootfs); err != nil {
		return nil, errorf(field("rootfs"), "%w", err)
	}
	env, err := environ(name, app.Environment)
	if err != nil {
		return nil, errorf(field("environment"), "%w", err)
	}
	if u := MetadataURL(opts); u != "" {
		env = append(env, "AC_METADATA_URL="+u)
	}
	wd, err := workingDir(rootfs, app.WorkingDirectory)
	if err != nil {
		return nil, errorf(field("workingDirectory"), "%w", err)
	}
	spec := &appexec.Spec{
		Name:       name,
		RootFS:     rootfs,
		Exec:       append([]string(nil), app.Exec...),
		Env:        env,
		WorkingDir: wd,
		Groups:     append([]int{}, app.SupplementaryGIDs...),
	}
	if spec.UID, spec.GID, err = resolveIDs(rootfs, app, opts, field); err != nil {
		return nil, err
	}
	if u := opts.PrivateUsers; u != nil {
		spec.UserNS = &idmap.Range{HostID: u.HostID, Size: u.Size}
	}
	_, docker := im.Annotations.Get("appc.io/docker/repository")
	mounts, appVols, devs, err := appMounts(podDir, ra, app, docker, vols, opts)
	if err != nil {
		return nil, errorf(field("mounts"), "%w", err)
	}
	if err := checkMountTargets(rootfs, mounts); err != nil {
		return nil, errorf(field("mounts"), "%w", err)
	}
	spec.Mounts = mounts
	res, err := resolveIsolation(app, ra.ReadOnlyRootFS, spec, opts)
	if err != nil {
		return nil, wrapField(fmt.Sprintf("app %q", name), err)
	}
	sup, err := supervision(annotations{ra.Annotations, im.Annotations})
	if err != nil {
		return nil, errorf(field("annotations"), "%w", err)
	}
	sio, err := stdio(ra.Annotations, opts.Interactive, k8sLogs)
	if err != nil {
		return nil, errorf(field("annotations"), "%w", err)
	}
	spec.ConsolePts = opts.Interactive && opts.Console && sio.Stdin == StdioInteractive
	spec.CtrlTTY = sio.Stdin == StdioTTY || spec.ConsolePts
	out := &App{Spec: *spec, Supervision: sup, Resources: res, Stdio: sio, EmptyVolumes: appVols, Devices: devs, SocketPorts: socketPorts(app)}
	for i, eh := range app.EventHandlers {
		f := field(fmt.Sprintf("eventHandlers[%d]", i))
		var dst *[]string
		switch eh.Name {
		case "pre-start":
			dst = &out.PreStart
		case "post-stop":
			dst = &out.PostStop
		default:
			return nil, errorf(f, "unknown eventHandler %q (want pre-start or post-stop)", eh.Name)
		}
		if *dst != nil {
			return nil, errorf(f, "%s given twice", eh.Name)
		}
		if len(eh.Exec) == 0 || eh.Exec[0] == "" {
			return nil, errorf(f, "%s: exec is empty", eh.Name)
		}
		*dst = slices.Clone(eh.Exec)
	}
	return out, nil
}

// resolveIDs resolves the app's user and group in its rootfs, and checks
// them and its supplementary groups against the pod's user namespace.
func resolveIDs(rootfs string, app *types.App, opts *Options, field func(string) string) (uid, gid int, err error) {
	if uid, err = resolveUser(rootfs, app.User); err != nil {
		return 0, 0, errorf(field("user"), "%w", err)
	}
	if gid, err = resolveGroup(rootfs, app.Group); err != nil {
		return 0, 0, errorf(field("group"), "%w", err)
	}
	u := opts.PrivateUsers
	if u == nil {
		return uid, gid, nil
	}
	// A user or group given as a file is that file's owner, and stage0
	// shifted the image's owners into the host's range: the id inside is
	// the owner's, shifted back.
	if strings.HasPrefix(app.User, "/") {
		if uid, err = u.FromHost(uid); err != nil {
			return 0, 0, errorf(field("user"), "owner of %s: %w", app.User, err)
		}
	}
	if strings.HasPrefix(app.Group, "/") {
		if gid, err = u.FromHost(gid); err != nil {
			return 0, 0, errorf(field("group"), "owner of %s: %w", app.Group, err)
		}
	}
	if !u.Contains(uid) {
		return 0, 0, errorf(field("user"), "uid %d is outside the pod's user namespace (0-%d, --private-users)", uid, u.Size-1)
	}
	if !u.Contains(gid) {
		return 0, 0, errorf(field("group"), "gid %d is outside the pod's user namespace (0-%d, --private-users)", gid, u.Size-1)
	}
	for _, g := range app.SupplementaryGIDs {
		if !u.Contains(g) {
			return 0, 0, errorf(field("supplementaryGIDs"), "gid %d is outside the pod's user namespace (0-%d, --private-users)", g, u.Size-1)
		}
	}
	return uid, gid, nil
}

// checkRootFS refuses an app root whose /proc, /sys or /dev is anything but
// a directory: mount(2) follows symlinks, and runc mounted procfs where the
// image pointed it (CVE-2019-19921, CVE-2023-27561, threats T6, T8).
func checkRootFS(rootfs string) error {
	st, err := os.Lstat(rootfs)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", rootfs)
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		st, err := os.Lstat(filepath.Join(rootfs, d))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("/%s is a %s in the image; it must be a directory", d, kindOf(st.Mode()))
		}
	}
	return nil
}

func kindOf(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeDevice != 0:
		return "device"
	case m.IsRegular():
		return "regular file"
	}
	return "non-directory"
}

// defaultEnv is rkt's default environment (stage1/init/common/app.go),
// applied for the names the app does not set.
var defaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SHELL=/bin/sh",
	"USER=root",
	"LOGNAME=root",
	"HOME=/root",
}

func environ(app string, appEnv types.Environment) ([]string, error) {
	var env []string
	set := map[string]bool{}
	for _, kv := range appEnv {
		if kv.Name == "" || strings.ContainsAny(kv.Name, "=\x00") {
			return nil, fmt.Errorf("invalid variable name %q", kv.Name)
		}
		if strings.IndexByte(kv.Value, 0) >= 0 {
			return nil, fmt.Errorf("variable %q contains a NUL byte", kv.Name)
		}
		if kv.Name == "AC_APP_NAME" || set[kv.Name] {
			continue
		}
		set[kv.Name] = true
		env = append(env, kv.Name+"="+kv.Value)
	}
	for _, kv := range defaultEnv {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			env = append(env, kv)
		}
	}
	return append(env, "AC_APP_NAME="+app), nil
}

// workingDir validates the working directory: a clean absolute path that
// exists as a directory inside the app's root and is not under the
// pseudo-filesystems the pod mounts. /proc/self/fd/N as a working
// directory gave runc's container a cwd on the host (CVE-2024-21626).
func workingDir(rootfs, wd string) (string, error) {
	if wd == "" {
		return "/", nil
	}
	if !path.IsAbs(wd) {
		return "", fmt.Errorf("%q is not an absolute path", wd)
	}
	if path.Clean(wd) != wd && path.Clean(wd)+"/" != wd {
		return "", fmt.Errorf("%q is not a clean path", wd)
	}
	wd = path.Clean(wd)
	for _, pseudo := range []string{"/proc", "/sys", "/dev"} {
		if wd == pseudo || strings.HasPrefix(wd, pseudo+"/") {
			return "", fmt.Errorf("%q is inside %s", wd, pseudo)
		}
	}
	if err := isDirInRoot(rootfs, wd); err != nil {
		return "", err
	}
	return wd, nil
}

// checkMountTargets refuses, before anything starts, a volume whose
// target the image's symlinks lead onto the app's root or its /proc, /sys
// or /dev (an image with data -> /proc); the app's set-up process checks
// again what it finds then (appexec), since the image may change.
func checkMountTargets(rootfs string, mounts []appexec.Mount) error {
	for _, m := range mounts {
		if m.Kind != appexec.KindBind || m.Optional {
			continue
		}
		// The app's /dev is a fresh tmpfs: nothing of the image's
		// leads there, and appMounts checked what may go on it.
		if appexec.OnDev(m.Target) {
			continue
		}
		p, err := securejoin.SecureJoin(rootfs, m.Target)
		if err != nil {
			return fmt.Errorf("target %s: %w", m.Target, err)
		}
		rel, _ := filepath.Rel(rootfs, p)
		rel = "/" + filepath.ToSlash(rel)
		if rel == "/." {
			return fmt.Errorf("target %s resolves to the app's root", m.Target)
		}
		for _, pseudo := range []string{"/proc", "/sys", "/dev"} {
			if rel == pseudo || strings.HasPrefix(rel, pseudo+"/") {
				return fmt.Errorf("target %s resolves to %s, on the app's %s", m.Target, rel, pseudo)
			}
		}
	}
	return nil
}
