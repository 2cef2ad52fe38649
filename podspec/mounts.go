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
	"syscall"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/layout"
)

type volume struct {
	types.Volume
	source string // absolute path in the pod's mount namespace
	file   bool
	// dev is set when the source is a device node on the host: the apps
	// that mount it may open it (rkt's DeviceAllow= of a device volume).
	dev *cgroups.Device
}

// With users (--private-users) an empty volume's owner is an id of the
// apps' user namespaces, shifted to the host's: by default the apps' root
// owns it, as without one.
func loadVolumes(podDir string, vs []types.Volume, users *idmap.Range) (map[types.ACName]volume, []SharedVolume, error) {
	var shared []SharedVolume
	out := make(map[types.ACName]volume, len(vs))
	for _, v := range vs {
		vol, sv, err := loadVolume(podDir, v, users)
		if err != nil {
			return nil, nil, errorf(fmt.Sprintf("pod manifest: volumes[%s]", v.Name), "%w", err)
		}
		if sv != nil {
			shared = append(shared, *sv)
		}
		out[v.Name] = vol
	}
	return out, shared, nil
}

// loadVolume checks one volume; an empty one comes with the directory the
// stage1 creates for it.
func loadVolume(podDir string, v types.Volume, users *idmap.Range) (volume, *SharedVolume, error) {
	vol := volume{Volume: v}
	switch v.Kind {
	case "host":
		if !filepath.IsAbs(v.Source) {
			return vol, nil, fmt.Errorf("source %q is not an absolute path", v.Source)
		}
		// A source that is (or passes through) a symlink is resolved
		// here, on the host, as rkt's stage1 does: the host's paths are
		// the operator's, and PID 1 takes each source as a tree of its
		// own, which a symlink is not.
		src, err := filepath.EvalSymlinks(v.Source)
		if err != nil {
			return vol, nil, fmt.Errorf("source: %w", err)
		}
		// What the source is (a device's numbers go on the app's
		// allow-list) is taken from the file opened, not from a
		// second walk of the path.
		f, err := os.OpenFile(src, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return vol, nil, fmt.Errorf("source: %w", err)
		}
		st, err := f.Stat()
		f.Close()
		if err != nil {
			return vol, nil, fmt.Errorf("source: %w", err)
		}
		vol.source, vol.file = src, !st.IsDir()
		vol.dev = deviceOf(st)
		return vol, nil, nil
	case "empty":
		vol.source = filepath.Join(podDir, layout.SharedVolumes, v.Name.String())
		sv, err := sharedVolume(&vol)
		if err != nil {
			return vol, nil, err
		}
		if users != nil {
			if sv.UID, err = users.ToHost(sv.UID); err == nil {
				sv.GID, err = users.ToHost(sv.GID)
			}
			if err != nil {
				return vol, nil, err
			}
		}
		return vol, &sv, nil
	}
	return vol, nil, fmt.Errorf("unsupported kind %q (want host or empty)", v.Kind)
}

// deviceOf is the device a host volume's source is, or nil.
func deviceOf(st os.FileInfo) *cgroups.Device {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || st.Mode()&os.ModeDevice == 0 {
		return nil
	}
	d := &cgroups.Device{Type: 'b', Major: int64(unix.Major(sys.Rdev)), Minor: int64(unix.Minor(sys.Rdev))}
	if st.Mode()&os.ModeCharDevice != 0 {
		d.Type = 'c'
	}
	return d
}

// appMounts builds the app's mount list: the pod's pseudo-filesystems,
// then its volumes parents-first, then the DNS and hostname files. As in
// rkt's stage1, the app's mounts come first (each may carry its own
// volume, mounts[].appVolume), then every image mountPoint whose path no
// mount took: on the pod volume of its name or, without one, on an
// implicit volume of its own. It also returns the empty volumes the app
// itself brings, which must exist before it starts, and the host devices
// its volumes are, which its device allow-list gets (read, and write
// unless the mount is read-only; never mknod).
func appMounts(podDir string, ra *schema.RuntimeApp, app *types.App, docker bool, vols map[types.ACName]volume, opts *Options) ([]appexec.Mount, []SharedVolume, []cgroups.Device, error) {
	ms := []appexec.Mount{
		{Kind: appexec.KindProc, Target: "/proc"},
		{Kind: appexec.KindSys, Target: "/sys", ReadOnly: true},
		{Kind: appexec.KindDev, Target: "/dev"},
	}
	var vm []appexec.Mount
	var shared []SharedVolume
	var devs []cgroups.Device
	add := func(v volume, target string, ro bool) error {
		t, err := mountTarget(target, &v)
		if err != nil {
			return err
		}
		// The volume's readOnly, when the pod manifest sets it, overrides
		// the image's mountPoint either way, as in rkt: the host's
		// directory is the operator's to share.
		if v.ReadOnly != nil {
			ro = *v.ReadOnly
		}
		vm = append(vm, appexec.Mount{Kind: appexec.KindBind, Source: v.source, Target: t, ReadOnly: ro, File: v.file,
			NoRecursive: v.Recursive != nil && !*v.Recursive, Device: v.dev != nil})
		if v.dev != nil {
			d := *v.dev
			d.Access = "rw"
			if ro {
				d.Access = "r"
			}
			devs = append(devs, d)
		}
		return nil
	}
	mountPointRO := func(name types.ACName) bool {
		for _, mp := range app.MountPoints {
			if mp.Name == name {
				return mp.ReadOnly
			}
		}
		return false
	}
	taken := map[string]bool{}
	for _, m := range ra.Mounts {
		taken[m.Path] = true
		v, ok := vols[m.Volume]
		if m.AppVolume != nil {
			var sv *SharedVolume
			var err error
			if v, sv, err = loadVolume(podDir, *m.AppVolume, opts.PrivateUsers); err != nil {
				return nil, nil, nil, fmt.Errorf("appVolume %q: %w", m.AppVolume.Name, err)
			}
			if sv != nil {
				shared = append(shared, *sv)
			}
		} else if !ok {
			return nil, nil, nil, fmt.Errorf("volume %q is not defined in the pod manifest", m.Volume)
		}
		if err := add(v, m.Path, mountPointRO(m.Volume)); err != nil {
			return nil, nil, nil, err
		}
	}
	for _, mp := range app.MountPoints {
		if taken[mp.Path] {
			continue
		}
		v, ok := vols[mp.Name]
		switch {
		case ok:
		case docker:
			// A Docker image's volume starts with what the image has
			// there: the image's own directory, a mount of its own.
			t, err := mountTarget(mp.Path, nil)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("mountPoint %q: %w", mp.Name, err)
			}
			vm = append(vm, appexec.Mount{Kind: appexec.KindBind, Target: t, ReadOnly: mp.ReadOnly, InPlace: true})
			continue
		default:
			// rkt's implicit volume: empty, 0755, root's, named after
			// the app and the mount point, gone with the pod.
			mode, zero := "0755", 0
			name, err := types.NewACName(ra.Name.String() + "-" + mp.Name.String())
			if err != nil {
				return nil, nil, nil, fmt.Errorf("mountPoint %q: %w", mp.Name, err)
			}
			var sv *SharedVolume
			v, sv, err = loadVolume(podDir, types.Volume{Name: *name, Kind: "empty", Mode: &mode, UID: &zero, GID: &zero}, opts.PrivateUsers)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("mountPoint %q: %w", mp.Name, err)
			}
			shared = append(shared, *sv)
		}
		if err := add(v, mp.Path, mp.ReadOnly); err != nil {
			return nil, nil, nil, fmt.Errorf("mountPoint %q: %w", mp.Name, err)
		}
	}
	sort.SliceStable(vm, func(i, j int) bool { return depth(vm[i].Target) < depth(vm[j].Target) })
	covered := map[string]bool{}
	for _, m := range vm {
		covered[m.Target] = true
	}
	// The pod's /dev/shm, shared by its apps, unless a volume of the
	// app's covers it.
	if !covered[devShm] {
		ms = append(ms, appexec.Mount{Kind: appexec.KindPodShm, Target: devShm})
	}
	ms = append(ms, vm...)
	// A volume on /etc/hosts (or resolv.conf, hostname) wins over the
	// generated file, as in rkt.
	for _, m := range dnsMounts(podDir, opts) {
		if !covered[m.Target] {
			ms = append(ms, m)
		}
	}
	return ms, shared, devs, nil
}

func depth(p string) int { return strings.Count(p, "/") }

const devShm = "/dev/shm"

// mountTarget validates a mount destination: inside the app's root (a
// relative one is taken from the root, as rkt does), and not on or under
// the pseudo-filesystems, where a volume would hide or fake them (a fake
// /proc absorbed runc's LSM label writes: CVE-2019-16884, threats T7).
// On /dev, v (nil for a mount of the image's own) may be a device volume
// on a node of its own, or a directory on /dev/shm (appexec.DevTarget).
func mountTarget(t string, v *volume) (string, error) {
	if t == "" {
		return "", errors.New("target is empty")
	}
	c := path.Clean("/" + t)
	if c == "/" {
		return "", fmt.Errorf("target %q is the root", t)
	}
	if v != nil && appexec.OnDev(c) {
		if err := appexec.DevTarget(c, v.dev != nil, v.file); err != nil {
			return "", err
		}
		return c, nil
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
		// A fallback, as rkt's: the image's own /etc/hosts wins.
		bind(filepath.Join(podDir, layout.HostsFile), "/etc/hosts")
		ms[len(ms)-1].IfMissing = true
	}
	bind(filepath.Join(podDir, layout.HostnameFile), "/etc/hostname")
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

// HostsContent is the pod's generated /etc/hosts, in the format of rkt's
// hosts-fallback with the pod's hostname added to the 127.0.0.1 line.
func HostsContent(hostname string) []byte {
	return []byte(strings.Replace(HostsFallback, localhostLine+"\n", localhostLine+" "+hostname+"\n", 1))
}

const localhostLine = "127.0.0.1 localhost localhost.domain localhost4 localhost4.localdomain4"

// HostsFallback is the stage1 image's etc/hosts-fallback (make image writes
// it), the lines rkt's stage1 has there: rkt's stage0 starts a
// --hosts-entry /etc/hosts from it, and the pod's generated file is it
// with the hostname added.
const HostsFallback = "# /etc/hosts of a rkt pod\n" + localhostLine + "\n\n" +
	"::1 ip6-localhost ip6-loopback localhost6 localhost6.localdomain6\n" +
	"fe00::0 ip6-localnet\nff00::0 ip6-mcastprefix\nff02::1 ip6-allnodes\nff02::2 ip6-allrouters\nff02::3 ip6-allhosts\n"

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
