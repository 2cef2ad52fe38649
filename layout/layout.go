// Package layout owns the pod directory's layout: where rkt's stage0 and
// pod1's stage1 put each file of a pod (contract §4-§5), as paths relative
// to the pod directory (the cwd of every stage1 entry point), and the
// stage1 annotation names, and the rkt data directory the pod directories
// live in (pods/<state>/<uuid>). Every package that reads or writes a pod
// directory, on the host side and in the stage1, takes its paths from
// here, so that two files can only collide where this file shows it.
//
// Files named after an app never share a directory with the stage1's own
// files: pod1's files in Pod1Dir have fixed names, and the per-app specs
// live in AppSpecDir, which holds nothing else. An app named "options" or
// "cgroups" once overwrote options.json or cgroups.json there.
package layout

import "path"

// Files and directories in the pod directory (contract §5).
const (
	// PodManifest is the pod manifest stage0 writes.
	PodManifest = "pod"
	// PodCreated is stage0's empty marker whose mtime is the creation time.
	PodCreated = "pod-created"
	// PodLock is the lock stage0 and pod1 serialise app operations with.
	PodLock = "pod.lck"
	// Pid names the pod's PID 1 (host pid) for enter and the host tools;
	// Ppid names a process whose only child is PID 1 (other stage1s).
	Pid  = "pid"
	Ppid = "ppid"
	// Subcgroup is the pod's cgroup path, written before Pid.
	Subcgroup = "subcgroup"
	// AppsInfo holds appsinfo/<app>/ (manifest, treeStoreID).
	AppsInfo = "appsinfo"
	// OverlayPrepared marks a pod whose trees are overlays.
	OverlayPrepared = "overlay-prepared"
	// Stage1TreeStoreID names the stage1 image's tree in the store.
	Stage1TreeStoreID = "stage1TreeStoreID"
	// NetInfo is written by stage1s that set up networks (rkt's name
	// and format; network/netinfo).
	NetInfo = "net-info.json"
	// Netns is the bind mount of the pod's network namespace, kept from
	// network setup to gc (rkt's stage1 keeps its path there).
	Netns = "netns"
	// NetDir holds the copy of each network's configuration taken at
	// setup, for gc's DEL.
	NetDir = "net"
	// SharedVolumes holds the pod's kind=empty volumes.
	SharedVolumes = "sharedVolumes"
	// AppOpsDir holds pod1 app's journal of app operations in progress
	// (hostside/appops), for gc to finish one a killed pod1 app left.
	AppOpsDir = "appops"
	// LogDir holds the apps' log files on a host without a journal:
	// "<app>.log" and its previous part "<app>.log.1" (package podlog).
	// Written by PID 1 through a directory fd, read by pod1 logs.
	LogDir = "pod1-logs"

	// Stage1Dir holds the stage1 image: Stage1Manifest and Stage1RootFS.
	Stage1Dir      = "stage1"
	Stage1Manifest = Stage1Dir + "/manifest"
	Stage1RootFS   = Stage1Dir + "/rootfs"
)

// MaxFileSize bounds what is read of any one file of a pod directory or
// of an image (manifests, specs, options, journals) and of one message
// that carries one: whoever ran the pod or built the image wrote them, and
// reading one must not be a way to exhaust the reader's memory. Real
// manifests are kilobytes.
const MaxFileSize = 16 << 20

// Paths inside the stage1 rootfs. Host tools read them below the rootfs
// they find (the overlay's upper directory for an overlay pod); the stage1
// reads them below Stage1RootFS.
const (
	RktDirIn    = "rkt"
	StatusDirIn = RktDirIn + "/status"
	EnvDirIn    = RktDirIn + "/env"
	HostsFileIn = RktDirIn + "/hosts"
	// HostnameFileIn is the pod's /etc/hostname, bound into every app as
	// rkt's stage1 gives each app one.
	HostnameFileIn     = RktDirIn + "/hostname"
	SupervisorStatusIn = RktDirIn + "/supervisor-status"
	Pod1DirIn          = RktDirIn + "/pod1"
	// AttachDirIn holds one directory per app served to rkt attach:
	// "endpoints" (JSON) and the sockets (rkt's iottymux layout).
	AttachDirIn = RktDirIn + "/iottymux"
	// DevLogDirIn holds one directory per app, each holding the socket
	// PID 1 reads the app's syslog messages from, bound as the app's
	// /dev/log (podlog.SocketName).
	DevLogDirIn = RktDirIn + "/devlog"
	Stage2DirIn = "opt/stage2"
	// HostHostsIn and HostResolvIn are the host's files rkt's stage0
	// copies in for --dns-conf-mode / --hosts-entry=host.
	HostHostsIn  = "etc/rkt-hosts"
	HostResolvIn = "etc/rkt-resolv.conf"
	// NetSetupIn is the stage1's CNI binary, beside the stage1 binary.
	NetSetupIn = "net-setup"
	// NetConfDirIn and NetPluginDirIn hold the stage1 image's network
	// configurations and CNI plugins (rkt's paths).
	NetConfDirIn   = "etc/rkt/net.d"
	NetPluginDirIn = "usr/lib/rkt/plugins/net"
	// PodJournalDirIn holds the pod's own journal, in a directory named
	// after the pod's machine id (MachineID), where rkt's stage1's
	// journald wrote it.
	PodJournalDirIn = "var/log/journal"
)

// HostJournalDir is the host's persistent journal. rkt's stage1 linked
// the pod's journal into it, as a link named after the pod's machine id,
// for journalctl -m to read with the host's own; gc removes the link.
const HostJournalDir = "/var/log/journal"

// MachineID is the pod's machine id, as rkt's stage1 gave it: the UUID's
// 32 hex digits, without dashes.
func MachineID(uuid string) string {
	b := make([]byte, 0, 32)
	for i := 0; i < len(uuid); i++ {
		if uuid[i] != '-' {
			b = append(b, uuid[i])
		}
	}
	return string(b)
}

// The same, relative to the pod directory.
const (
	RktDir           = Stage1RootFS + "/" + RktDirIn
	StatusDir        = Stage1RootFS + "/" + StatusDirIn
	EnvDir           = Stage1RootFS + "/" + EnvDirIn
	HostsFile        = Stage1RootFS + "/" + HostsFileIn
	HostnameFile     = Stage1RootFS + "/" + HostnameFileIn
	SupervisorStatus = Stage1RootFS + "/" + SupervisorStatusIn
	Stage2Dir        = Stage1RootFS + "/" + Stage2DirIn
	AttachDir        = Stage1RootFS + "/" + AttachDirIn
	DevLogDir        = Stage1RootFS + "/" + DevLogDirIn
	PodJournalDir    = Stage1RootFS + "/" + PodJournalDirIn
)

// pod1's own files, out of every app's reach (the stage1 rootfs is not in
// any app's root) and out of every app name's reach: Pod1Dir holds only
// the names below, and nothing in it is named after an app.
const (
	Pod1Dir = Stage1RootFS + "/" + Pod1DirIn
	// AppSpecDir holds each app's resolved spec as "<app>.json", for the
	// entry points that build a process like the app's (enter, app/add).
	AppSpecDir = Pod1Dir + "/apps"
	// OptionsFile saves the pod's run options for app/add.
	OptionsFile = Pod1Dir + "/options.json"
	// CgroupsFile saves the pod's cgroup (cgroups.Group as JSON) for gc.
	CgroupsFile = Pod1Dir + "/cgroups.json"
	// ControlSocket is PID 1's control channel. Relative, which also keeps
	// it within the 108 bytes a socket address may hold.
	ControlSocket = Pod1Dir + "/control.sock"
)

// The names in an app's directory (AppDir) and in its appsinfo/<app>/.
const (
	// RootfsName is the app's root directory in AppDir.
	RootfsName = "rootfs"
	// ManifestName is the app's image manifest, in both.
	ManifestName = "manifest"
	// TreeStoreIDName names the app's image tree in the store
	// (appsinfo/<app>/ of an overlay pod).
	TreeStoreIDName = "treeStoreID"
)

// An app's entries in the status directory (StatusDir), rkt's: its exit
// status file, named after the app, and stage0's markers beside it, the
// app's name and a suffix, whose mtimes say when the app was created and
// last started in a mutable pod. An app named like another's marker
// ("web-created" beside "web") would share its files.
const (
	CreatedSuffix = "-created"
	StartedSuffix = "-started"
)

// MarkerSuffixes lists the markers' suffixes.
func MarkerSuffixes() []string { return []string{CreatedSuffix, StartedSuffix} }

// AppDir is stage1/rootfs/opt/stage2/<app>: the app's image manifest and
// rootfs.
func AppDir(app string) string { return path.Join(Stage2Dir, app) }

// AppRootfs is the app's root directory.
func AppRootfs(app string) string { return path.Join(Stage2Dir, app, RootfsName) }

// AppManifest is the app's image manifest as the stage1 reads it.
func AppManifest(app string) string { return path.Join(Stage2Dir, app, ManifestName) }

// AppInfoDir is appsinfo/<app>.
func AppInfoDir(app string) string { return path.Join(AppsInfo, app) }

// AppInfoManifest is appsinfo/<app>/manifest, stage0's copy of the app's
// image manifest.
func AppInfoManifest(app string) string { return path.Join(AppsInfo, app, ManifestName) }

// AppInfoTreeStoreID is appsinfo/<app>/treeStoreID.
func AppInfoTreeStoreID(app string) string { return path.Join(AppsInfo, app, TreeStoreIDName) }

// AppSpec is the app's resolved spec.
func AppSpec(app string) string { return path.Join(AppSpecDir, app+".json") }

// AppEnv is the environment file stage0 writes for the app.
func AppEnv(app string) string { return path.Join(EnvDir, app) }

// The rkt data directory (--dir, /var/lib/rkt by default), as paths
// relative to it: each pod's directory is pods/<state>/<uuid>, its state
// the directory it is in (rkt's common.go), beside the image stores.
const (
	PodsDir = "pods"
	// The state directories, in the order a pod passes through them.
	PodsEmbryo        = "embryo"
	PodsPrepare       = "prepare"
	PodsPrepared      = "prepared"
	PodsRun           = "run"
	PodsExitedGarbage = "exited-garbage"
	PodsGarbage       = "garbage"
	// ImageStoreDir is pod1 run's store of unpacked images,
	// <ImageStoreDir>/<store id>/rootfs; TreeStoreDir is rkt's.
	ImageStoreDir = "pod1/images"
	TreeStoreDir  = "cas/tree"
)

// PodStates lists the state directories, in the order a pod passes
// through them.
func PodStates() []string {
	return []string{PodsEmbryo, PodsPrepare, PodsPrepared, PodsRun, PodsExitedGarbage, PodsGarbage}
}

// StateDir is pods/<state>.
func StateDir(state string) string { return path.Join(PodsDir, state) }

// PodIn is pods/<state>/<uuid>, the pod's directory while it is in state.
func PodIn(state, uuid string) string { return path.Join(PodsDir, state, uuid) }

// Stage1 image annotations (contract §1).
const (
	AnnRun              = "coreos.com/rkt/stage1/run"
	AnnStop             = "coreos.com/rkt/stage1/stop"
	AnnGC               = "coreos.com/rkt/stage1/gc"
	AnnEnter            = "coreos.com/rkt/stage1/enter"
	AnnAppAdd           = "coreos.com/rkt/stage1/app/add"
	AnnAppStart         = "coreos.com/rkt/stage1/app/start"
	AnnAppStop          = "coreos.com/rkt/stage1/app/stop"
	AnnAppRm            = "coreos.com/rkt/stage1/app/rm"
	AnnAttach           = "coreos.com/rkt/stage1/attach"
	AnnInterfaceVersion = "coreos.com/rkt/stage1/interface-version"
	// AnnMutable is the pod manifest annotation of a mutable pod.
	AnnMutable = "coreos.com/rkt/stage1/mutable"
)

// IsUUID accepts the form rkt gives pod UUIDs, which names pod
// directories and the pods' cgroups: 8-4-4-4-12 lowercase hex digits.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}
