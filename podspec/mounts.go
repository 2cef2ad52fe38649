package podspec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/layout"
)

type volume struct {
	types.Volume
	source string // absolute path in the pod's mount namespace
	file   bool
}

// With users (--private-users) an empty volume's owner is an id of the
// apps' user namespaces, shifted to the host's: by default the apps' root
// owns it, as without one.
func loadVolumes(podDir string, vs []types.Volume, users *idmap.Range) (map[types.ACName]volume, []SharedVolume, error) {
	var shared []SharedVolume
	out := make(map[types.ACName]volume, len(vs))
	for _, v := range vs {
		field := fmt.Sprintf("pod manifest: volumes[%s]", v.Name)
		vol := volume{Volume: v}
		switch v.Kind {
		case "host":
			if !filepath.IsAbs(v.Source) {
				return nil, nil, errorf(field, "source %q is not an absolute path", v.Source)
			}
			st, err := os.Stat(v.Source)
			if err != nil {
				return nil, nil, errorf(field, "source: %w", err)
			}
			vol.source, vol.file = v.Source, !st.IsDir()
		case "empty":
			vol.source = filepath.Join(podDir, layout.SharedVolumes, v.Name.String())
			sv, err := sharedVolume(&vol)
			if err != nil {
				return nil, nil, errorf(field, "%w", err)
			}
			if users != nil {
				if sv.UID, err = users.ToHost(sv.UID); err == nil {
					sv.GID, err = users.ToHost(sv.GID)
				}
				if err != nil {
					return nil, nil, errorf(field, "%w", err)
				}
			}
			shared = append(shared, sv)
		default:
			return nil, nil, errorf(field, "unsupported kind %q (want host or empty)", v.Kind)
		}
		out[v.Name] = vol
	}
	return out, shared, nil
}

// appMounts builds the app's mount list: the pod's pseudo-filesystems,
// then its volumes parents-first, then the DNS files.
func appMounts(podDir string, ra *schema.RuntimeApp, app *types.App, vols map[types.ACName]volume, opts *Options) ([]appexec.Mount, error) {
	ms := []appexec.Mount{
		{Kind: appexec.KindProc, Target: "/proc"},
		{Kind: appexec.KindSys, Target: "/sys", ReadOnly: true},
		{Kind: appexec.KindDev, Target: "/dev"},
	}
	var vm []appexec.Mount
	seen := map[types.ACName]bool{}
	add := func(volName types.ACName, target string, ro bool) error {
		v, ok := vols[volName]
		if !ok {
			return fmt.Errorf("volume %q is not defined in the pod manifest", volName)
		}
		t, err := mountTarget(target)
		if err != nil {
			return err
		}
		if v.ReadOnly != nil && *v.ReadOnly {
			ro = true
		}
		vm = append(vm, appexec.Mount{Kind: appexec.KindBind, Source: v.source, Target: t, ReadOnly: ro, File: v.file})
		seen[volName] = true
		return nil
	}
	for _, m := range ra.Mounts {
		if err := add(m.Volume, m.Path, false); err != nil {
			return nil, err
		}
	}
	for _, mp := range app.MountPoints {
		if seen[mp.Name] {
			continue
		}
		if err := add(mp.Name, mp.Path, mp.ReadOnly); err != nil {
			return nil, fmt.Errorf("mountPoint %q: %w", mp.Name, err)
		}
	}
	sort.SliceStable(vm, func(i, j int) bool { return depth(vm[i].Target) < depth(vm[j].Target) })
	ms = append(ms, vm...)
	ms = append(ms, dnsMounts(podDir, opts)...)
	return ms, nil
}

func depth(p string) int { return strings.Count(p, "/") }

// mountTarget validates a mount destination: absolute, and not on or under
// the pseudo-filesystems, where a volume would hide or fake them (a fake
// /proc absorbed runc's LSM label writes: CVE-2019-16884, threats T7).
func mountTarget(t string) (string, error) {
	if !path.IsAbs(t) {
		return "", fmt.Errorf("target %q is not an absolute path", t)
	}
	c := path.Clean(t)
	if c == "/" {
		return "", fmt.Errorf("target %q is the root", t)
	}
	for _, pseudo := range []string{"/proc", "/sys", "/dev"} {
		if c == pseudo || strings.HasPrefix(c, pseudo+"/") {
			return "", fmt.Errorf("target %q is on %s", t, pseudo)
		}
	}
	return c, nil
}

func dnsMounts(podDir string, opts *Options) []appexec.Mount {
	var ms []appexec.Mount
	bind := func(src, target string) {
		ms = append(ms, appexec.Mount{Kind: appexec.KindBind, Source: src, Target: target, ReadOnly: true, File: true, Optional: true})
	}
	switch opts.HostsMode {
	case "host":
		bind("/etc/hosts", "/etc/hosts")
	case "stage0":
		bind(filepath.Join(podDir, layout.Stage1RootFS, layout.HostHostsIn), "/etc/hosts")
	default:
		bind(filepath.Join(podDir, layout.HostsFile), "/etc/hosts")
	}
	switch opts.ResolvMode {
	case "host":
		bind("/etc/resolv.conf", "/etc/resolv.conf")
	case "stage0":
		bind(filepath.Join(podDir, layout.Stage1RootFS, layout.HostResolvIn), "/etc/resolv.conf")
	case "default":
		// The file exists only if a network's plugin gave DNS settings
		// (net-setup writes it before the apps start).
		bind(filepath.Join(podDir, layout.Stage1RootFS, layout.HostResolvIn), "/etc/resolv.conf")
		ms[len(ms)-1].IfSource = true
	}
	return ms
}

// HostsContent is the pod's generated /etc/hosts.
func HostsContent(hostname string) []byte {
	return []byte("127.0.0.1\tlocalhost localhost.localdomain\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n")
}

// SharedVolume is an "empty" volume, created by the stage1 under
// sharedVolumes/ before the apps start.
type SharedVolume struct {
	Path     string
	Mode     os.FileMode
	UID, GID int
}

// Create makes the volume's directory if it does not exist yet.
func (v *SharedVolume) Create(podDir string) error {
	if err := os.MkdirAll(filepath.Join(podDir, layout.SharedVolumes), 0o750); err != nil {
		return fmt.Errorf("create %s: %w", layout.SharedVolumes, err)
	}
	if err := os.Mkdir(v.Path, v.Mode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create volume %s: %w", v.Path, err)
	}
	if err := os.Chmod(v.Path, v.Mode); err != nil {
		return fmt.Errorf("chmod volume %s: %w", v.Path, err)
	}
	if err := os.Lchown(v.Path, v.UID, v.GID); err != nil {
		return fmt.Errorf("chown volume %s: %w", v.Path, err)
	}
	return nil
}

func sharedVolume(v *volume) (SharedVolume, error) {
	sv := SharedVolume{Path: v.source, Mode: 0o755}
	if v.Mode != nil {
		m, err := strconv.ParseUint(*v.Mode, 8, 32)
		if err != nil || m > 0o7777 {
			return sv, fmt.Errorf("mode %q is not an octal file mode", *v.Mode)
		}
		sv.Mode = os.FileMode(m&0o777) | modeBits(m)
	}
	if v.UID != nil {
		sv.UID = *v.UID
	}
	if v.GID != nil {
		sv.GID = *v.GID
	}
	return sv, nil
}

func modeBits(m uint64) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}
