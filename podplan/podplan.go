// Package podplan is the plan PID 1 and the app set-up carry out: the pod
// and its apps as the run entry point resolved and checked them (package
// podspec reads and validates what stage0 left; this package only holds
// the result). It is what crosses to PID 1, as JSON, and what the
// start-path binary links: nothing here may import the manifest schema,
// netlink or CNI (the depguard rule "lean" in .golangci.yml), so that
// PID 1 does not pay their start-up and memory.
package podplan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/layout"
)

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
	// Console: the pod is interactive and the caller's stdin is a
	// terminal. The app then gets a pseudo-terminal of its own as its
	// controlling terminal, which PID 1 joins to the caller's
	// (stage1-init console.go), rather than the caller's terminal itself.
	Console bool `json:"console,omitempty"`
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
	// ShmSize bounds the pod's /dev/shm, in bytes (pod1/shm-size): 0 for
	// tmpfs's default, half of the host's memory.
	ShmSize int64 `json:"shmSize,omitempty"`
	// Cgroup is the pod's cgroup, made by the run entry point; nil when
	// the host has no usable cgroup hierarchy.
	Cgroup *cgroups.Group `json:"cgroup,omitempty"`
	// AppsControllers are the controllers the apps' cgroup must hand
	// down to the apps' own, on a host with only cgroup v2: PID 1 does,
	// once it has made the apps' cgroup namespace there (a cgroup that
	// hands controllers down holds no process, and only a process in it
	// can root a namespace there).
	AppsControllers []string `json:"appsControllers,omitempty"`
	// CRIDir is the host directory of the apps' CRI log files (rkt's
	// k8s-plain log mode), or "".
	CRIDir string `json:"criDir,omitempty"`
	// CRIFormat is the CRI files' format: CRIFormatRkt or
	// CRIFormatKubelet (pod1/cri-log-format).
	CRIFormat string `json:"criFormat,omitempty"`
	// ConsoleRaw: the apps' lines reach the console as they wrote them,
	// not as "<app>[<pid>]: <line>" (pod1/console-format).
	ConsoleRaw bool `json:"consoleRaw,omitempty"`
	// Machined is how the run entry point registers the pod with
	// systemd-machined: MachinedUnit, MachinedScope or MachinedNo
	// (AnnMachined). PID 1 has no use for it.
	Machined string `json:"-"`
	// PodJournal is whether the pod has a journal of its own
	// (AnnPodJournal): PodJournalAuto, PodJournalYes or PodJournalNo.
	// The run entry point decides LogSinks.PodJournal from it.
	PodJournal string `json:"-"`
	// Logs says where PID 1 sends the apps' output lines besides the
	// console; the run entry point decides it.
	Logs LogSinks `json:"logs"`
	// EmptyVolumes are created on the host side before PID 1 starts.
	EmptyVolumes []SharedVolume `json:"-"`
	// VolumeSources are the pod manifest's host volumes: PID 1, in a
	// root of its own, keeps them reachable for apps added later.
	VolumeSources []VolumeSource `json:"volumeSources,omitempty"`
	// HostPidNS is the pid namespace run was started in, the host's:
	// PID 1 serves its sockets to root peers of it alone (control.Peers).
	// PID 1, in a root of its own, cannot open it to see for itself.
	HostPidNS control.NamespaceID `json:"hostPidNS"`
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
	// Sockets are the sockets the app's process gets as its fds 3..
	// (socket activation, sockets.go); SocketPorts are its
	// socket-activated ports, which run matches them to.
	Sockets     []Socket     `json:"sockets,omitempty"`
	SocketPorts []SocketPort `json:"-"`
}

// LogSinks are where the apps' output lines go besides the console.
type LogSinks struct {
	// Journal: the host's journal listens; every line goes there.
	Journal bool `json:"journal,omitempty"`
	// Files: no journal; every line goes to the app's file in the
	// pod's log directory (LogDir).
	Files bool `json:"files,omitempty"`
	// PodJournal: every line also goes to the pod's own journal, a
	// journal file in the stage1's /var/log/journal/<machine id>
	// (layout.PodJournalDir), which run hands PID 1 open
	// (handover.JournalDirFd) and, on a host with a persistent journal,
	// links into the host's /var/log/journal, as rkt's stage1 did.
	PodJournal bool `json:"podJournal,omitempty"`
	// BootID is the host's boot id, which the pod's journal's entries
	// carry (the boot of their monotonic clock): PID 1's procfs has no
	// /proc/sys to read it in.
	BootID string `json:"bootID,omitempty"`
}

// pod1's own CRI log option.
const (
	// AnnCRILogFormat (pod) chooses the CRI files' format:
	// CRIFormatRkt, the default, or CRIFormatKubelet.
	AnnCRILogFormat = "pod1/cri-log-format"
	// CRIFormatRkt is "<time> <stream> <line>", what rkt v1.30.0's
	// stage1 writes and its functional tests read.
	CRIFormatRkt = "rkt"
	// CRIFormatKubelet is "<time> <stream> <F|P> <line>", what current
	// kubelets read.
	CRIFormatKubelet = "kubelet"
)

// pod1's console option.
const (
	// AnnConsoleFormat (pod) chooses how the apps' lines reach the
	// console of rkt run: ConsoleFormatRkt, the default, or
	// ConsoleFormatRaw.
	AnnConsoleFormat = "pod1/console-format"
	// ConsoleFormatRkt is "<app>[<pid>]: <line>", what rkt's default
	// stage1 prints (journald forwarding to the console).
	ConsoleFormatRkt = "rkt"
	// ConsoleFormatRaw is the bytes as the app wrote them.
	ConsoleFormatRaw = "raw"
)

// pod1's machined option.
const (
	// AnnMachined (pod) says which pods are registered with
	// systemd-machined, as machine rkt-<uuid> (docs/hosts.md).
	AnnMachined = "pod1/machined"
	// MachinedUnit, the default, registers a pod that runs in a unit of
	// its own (systemd-run rkt run, a .service): the pod stays in the
	// unit. Others are not registered: their cgroups stay where they
	// are, below the caller's, and outlive the pod until gc.
	MachinedUnit = "unit"
	// MachinedScope also registers the others, in the scope
	// machine.slice/machine-rkt\x2d<uuid>.scope that systemd makes for
	// them, where rkt's stage1 had them; systemd removes that scope, and
	// the pod's cgroups in it, when the pod ends.
	MachinedScope = "scope"
	// MachinedNo leaves machined alone.
	MachinedNo = "no"
)

// pod1's option for the pod's own journal.
const (
	// AnnPodJournal (pod) says whether the pod has a journal of its own,
	// which journalctl -M rkt-<uuid> and, through the host's
	// /var/log/journal, journalctl -m read (docs/logging.md).
	AnnPodJournal = "pod1/pod-journal"
	// PodJournalAuto, the default, gives a pod its journal on a host
	// that runs systemd, as rkt's stage1 did (its journald).
	PodJournalAuto = "auto"
	// PodJournalYes gives it one on any host.
	PodJournalYes = "yes"
	// PodJournalNo gives it none: the lines are in the host's journal
	// only (or the pod's log files).
	PodJournalNo = "no"
)

// Stdio modes of one stream of an app.
const (
	// StdioNull is /dev/null: stdin's default (rkt gives an app no
	// input unless asked).
	StdioNull = "null"
	// StdioLog sends each line to the pod's logs and the console:
	// stdout's and stderr's default.
	StdioLog = "log"
	// StdioInteractive is the caller's own descriptor: every stream of
	// the one app of an --interactive pod.
	StdioInteractive = "interactive"
	// StdioStream is a pipe PID 1 serves to `rkt attach` clients: input
	// from them, output to them (and logged).
	StdioStream = "stream"
	// StdioTTY is a pseudo-terminal PID 1 holds the master of and serves
	// to `rkt attach` clients; a tty stdin is the app's controlling
	// terminal.
	StdioTTY = "tty"
)

// Stdio is where an app's three standard descriptors go.
type Stdio struct {
	Stdin  string `json:"stdin"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// CRIPath is the app's file in the pod's CRI log directory (a single
	// file name), or "" for none.
	CRIPath string `json:"criPath,omitempty"`
}

// Attached reports whether any stream is served to `rkt attach`.
func (s *Stdio) Attached() bool {
	for _, m := range []string{s.Stdin, s.Stdout, s.Stderr} {
		if m == StdioStream || m == StdioTTY {
			return true
		}
	}
	return false
}

// Restart policies.
const (
	RestartNever     = "never"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

// Pod exit policies.
const (
	ExitAllApps = "all-apps" // rkt's: the pod ends when every app has
	ExitAnyApp  = "any-app"  // the first app to finish ends the pod
	ExitMainApp = "main-app" // the main app's end ends the pod
)

// Defaults of the supervision settings.
const (
	DefaultBackoff            = 100 * time.Millisecond
	DefaultBackoffMax         = 10 * time.Second
	DefaultStartLimitBurst    = 5
	DefaultStartLimitInterval = 10 * time.Second
	DefaultPidsMax            = 8192
)

// Supervision is how PID 1 looks after one app.
type Supervision struct {
	Restart    string        `json:"restart"`
	Backoff    time.Duration `json:"backoff"`
	BackoffMax time.Duration `json:"backoffMax"`
	// A start beyond Burst starts within Interval fails the app for good.
	Burst    int           `json:"burst"`
	Interval time.Duration `json:"interval"`
	// Grace is the time between SIGTERM and SIGKILL when the app is
	// stopped.
	Grace time.Duration `json:"grace"`
	// PidsMax is the app's cgroup's pids.max: 0 for none, -1 for
	// AppPidsMax's default, which depends on the pod's limit.
	PidsMax int `json:"pidsMax"`
}

// AppPidsMax is an app's pids.max when its annotations set none, given
// the pod's (its apps' cgroup's; 0 for none): DefaultPidsMax, but at most
// three quarters of the pod's, so that one fork-bombing app leaves its
// siblings a quarter of the pod's tasks to fork and exec with. Above it
// (the per-app default was once above the pod's whole limit on a host
// with a small pid_max) one app could take every task the pod had.
func AppPidsMax(pod int) int {
	if pod <= 0 {
		return DefaultPidsMax
	}
	return max(min(DefaultPidsMax, pod-pod/4), 1)
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
