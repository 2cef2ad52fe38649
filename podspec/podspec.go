// Package podspec owns the validated description of a pod: it reads what
// rkt's stage0 left in the pod directory (the pod manifest, each app's
// image manifest and rootfs), checks all of it, and resolves it into the
// Pod that the stage1 carries out. Every error it returns names the field
// at fault, so the stage1 can refuse a bad pod with one line and exit 254
// before anything starts.
package podspec

import (
	"fmt"
	"time"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/idmap"
)

// MaxManifestSize caps how much of a manifest is read: a stage1 that reads
// an unbounded file can be made to exhaust memory, and PID 1 running out of
// memory ends the pod without statuses (threats B2).
const MaxManifestSize = 16 << 20

// DefaultGracePeriod is how long apps get between SIGTERM and SIGKILL when
// the pod stops.
const DefaultGracePeriod = 10 * time.Second

// Options are the stage1 flags that shape the pod (contract §2).
type Options struct {
	UUID        string
	Debug       bool
	Net         []string
	Interactive bool
	Hostname    string
	// ResolvMode and HostsMode are the two halves of --dns-conf-mode.
	ResolvMode string
	HostsMode  string
	IPC        string
	Mutable    bool
	MDSToken   string
	// Insecure options (--disable-*): the isolators and defaults they
	// turn off are still validated, then not applied.
	DisableCapabilities bool
	DisablePaths        bool
	DisableSeccomp      bool
	// PrivateUsers is --private-users: every app gets a user namespace
	// with this mapping.
	PrivateUsers *idmap.Range `json:",omitempty"`
}

// MetadataURL is the apps' AC_METADATA_URL for --mds-token, as rkt's
// stage1 makes it, when the pod shares the host's network: the metadata
// service's port at 127.0.0.1. A pod with networks of its own reaches the
// host at its forwarding network's gateway, which only the network setup
// knows (the run entry point sets it then, with MetadataURLAt).
func MetadataURL(o *Options) string {
	if o.MDSToken == "" || !o.NetHost() {
		return ""
	}
	return MetadataURLAt("127.0.0.1", o.MDSToken)
}

// MetadataURLAt is the metadata service's URL for token at the host
// address ip (rkt's port, 18112).
func MetadataURLAt(ip, token string) string {
	return "http://" + ip + ":18112/" + token
}

// NetHost reports whether the pod stays in the host's network namespace.
func (o *Options) NetHost() bool {
	for _, n := range o.Net {
		if n == "host" {
			return true
		}
	}
	return false
}

// Pod is what the pod's PID 1 carries out. It crosses from the run
// entrypoint to PID 1 as JSON.
type Pod struct {
	UUID     string `json:"uuid"`
	Hostname string `json:"hostname"`
	NewNet   bool   `json:"newNet"`
	// PrivateUsers: the apps run in user namespaces (--private-users).
	PrivateUsers bool `json:"privateUsers,omitempty"`
	Mutable      bool `json:"mutable,omitempty"`
	// Interactive: the app has the caller's terminal, and /dev/console
	// is on its device allow-list.
	Interactive bool `json:"interactive,omitempty"`
	// AllDevices: no device allow-list (--disable-paths, rkt's insecure
	// option "paths", which drops its DevicePolicy= too).
	AllDevices  bool          `json:"allDevices,omitempty"`
	GracePeriod time.Duration `json:"gracePeriod"`
	Apps        []App         `json:"apps"`
	// ExitPolicy and MainApp decide when the pod ends.
	ExitPolicy string `json:"exitPolicy"`
	MainApp    string `json:"mainApp,omitempty"`
	// PidsMax is the pod's cgroup's pids.max: -1 for the host's default
	// (cgroups.DefaultPodPidsMax), 0 for none.
	PidsMax int `json:"pidsMax"`
	// Cgroup is the pod's cgroup, made by the run entry point; nil when
	// the host has no usable cgroup hierarchy.
	Cgroup *cgroups.Group `json:"cgroup,omitempty"`
	// CRIDir is the host directory of the apps' CRI log files (rkt's
	// k8s-plain log mode), or "".
	CRIDir string `json:"criDir,omitempty"`
	// CRIFormat is the CRI files' format: CRIFormatRkt or
	// CRIFormatKubelet (pod1/cri-log-format).
	CRIFormat string `json:"criFormat,omitempty"`
	// Logs says where PID 1 sends the apps' output lines besides the
	// console; the run entry point decides it.
	Logs LogSinks `json:"logs"`
	// EmptyVolumes are created on the host side before PID 1 starts.
	EmptyVolumes []SharedVolume `json:"-"`
	// VolumeSources are the pod manifest's host volumes: PID 1, in a
	// root of its own, keeps them reachable for apps added later.
	VolumeSources []VolumeSource `json:"volumeSources,omitempty"`
}

// VolumeSource is a host volume's source, a directory unless File.
type VolumeSource struct {
	Path string `json:"path"`
	File bool   `json:"file,omitempty"`
}

// App is one app: the spec its process is made from and how PID 1
// supervises it.
type App struct {
	Spec        appexec.Spec `json:"spec"`
	Supervision Supervision  `json:"supervision"`
	// EmptyVolumes are the empty volumes the app brings (its mounts'
	// appVolumes, implicit volumes), created with the pod's.
	EmptyVolumes []SharedVolume `json:"-"`
	// PreStart and PostStop are the commands of the app's appc
	// eventHandlers, run in the app's root as rkt's stage1 runs them
	// (supervisor/handlers.go).
	PreStart []string `json:"preStart,omitempty"`
	PostStop []string `json:"postStop,omitempty"`
	// Devices are the host devices the app's volumes are: its device
	// allow-list has them besides cgroups.AppDevices.
	Devices []cgroups.Device `json:"devices,omitempty"`
	// Resources are the limits put on the app's cgroup.
	Resources cgroups.Limits `json:"resources"`
	// Stdio is where its standard descriptors go.
	Stdio Stdio `json:"stdio"`
}

// LogSinks are where the apps' output lines go besides the console.
type LogSinks struct {
	// Journal: the host's journal listens; every line goes there.
	Journal bool `json:"journal,omitempty"`
	// Files: no journal; every line goes to the app's file in the
	// pod's log directory (LogDir).
	Files bool `json:"files,omitempty"`
}

// fieldError is a validation failure of one field.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

func errorf(field, format string, a ...any) error {
	return &fieldError{field: field, err: fmt.Errorf(format, a...)}
}
