// Package appexec owns the making of an app process: the Spec that says
// everything about it, and the child side that turns a freshly cloned
// process (in a mount namespace of its own, inside the pod's other
// namespaces) into the app: its mounts, its root, its credentials, its fds,
// its signal state, and finally the execve of the app's binary.
//
// Every app process of a pod is made by this one code path, so that no
// entry point can hand out less isolation than another (rkt's enter did:
// CVE-2019-10144/10145/10147).
package appexec

import "github.com/pod1/pod1/idmap"

// Spec is everything the child needs to become the app. It is built and
// validated on the host side before the pod starts, so the child only
// carries it out.
type Spec struct {
	// Name is the app's name (an ACName), used in messages and to find
	// the app's files.
	Name string `json:"app"`
	// RootFS is the absolute path of the app's root in the pod's mount
	// namespace.
	RootFS string `json:"rootfs"`
	// Exec is the command; Exec[0] without a slash is looked up in the
	// PATH of Env, inside the app's root.
	Exec []string `json:"exec"`
	// Env is the complete environment, KEY=VALUE.
	Env []string `json:"env"`
	// WorkingDir is a clean absolute path inside the app's root.
	WorkingDir string `json:"workingDir"`
	// UID, GID and Groups are the app's credentials.
	UID    int   `json:"uid"`
	GID    int   `json:"gid"`
	Groups []int `json:"groups"`
	// Mounts are made in order, each target resolved inside RootFS.
	Mounts []Mount `json:"mounts"`
	// MaskedPaths (under /proc and /sys) are covered, once the mounts
	// are made, by an empty node no one may read or write: rkt's
	// InaccessiblePaths. ReadOnlyPaths are made read-only.
	MaskedPaths   []string `json:"maskedPaths,omitempty"`
	ReadOnlyPaths []string `json:"readOnlyPaths,omitempty"`
	// ReadOnlyRootFS makes the app's root read-only; the mounts on it
	// keep their own modes.
	ReadOnlyRootFS bool `json:"readOnlyRootFS,omitempty"`
	// Isolation is applied last, by Exec.
	Isolation Isolation `json:"isolation"`
	// UserNS, when set (--private-users), puts the app in a user
	// namespace of its own whose ids 0 to Size-1 are the host's HostID
	// onwards: the app's root is not the host's.
	UserNS *idmap.Range `json:"userns,omitempty"`
	// DevLog, when set, is the datagram socket PID 1 reads the app's
	// syslog messages from (podlog), bound as /dev/log in the app's
	// /dev. PID 1 sets it when it starts the app; it is not part of the
	// spec the host side builds.
	DevLog string `json:"devLog,omitempty"`
	// StageBinds are the paths PID 1's own root holds a tree of the
	// host's at, one bind each (stage1-init/pid1's ownRootBinds). A bind
	// volume whose source holds one of them would show it, stacked on
	// the source's own tree where the host has no mount, a directory
	// the app could neither rename nor remove: the set-up takes them
	// off its copy (unstack). PID 1 sets it when it starts the app; it
	// is not part of the spec the host side builds.
	StageBinds []string `json:"stageBinds,omitempty"`
	// CgroupNS: the set-up process holds the apps' cgroup namespace at
	// CgroupNSFd, and clones the app's process into it.
	CgroupNS bool `json:"cgroupNS,omitempty"`
	// CtrlTTY makes fd 0, a pseudo-terminal PID 1 holds the master of
	// (rkt's tty stdin), the controlling terminal of the app's session.
	CtrlTTY bool `json:"ctrlTTY,omitempty"`
	// ConsolePts: the app's /dev/pts is the devpts instance of the pod's
	// console (ConsolePts, in PID 1's root) instead of one of its own,
	// and its stdio, a terminal there, is opened again through it: the
	// name ttyname(3) finds for it is then /dev/pts/N (an interactive
	// pod's app, whose terminal PID 1 joins to the caller's).
	ConsolePts bool `json:"consolePts,omitempty"`
	// Listen names the sockets the app's process gets as its fds 3..
	// (socket activation): the set-up process holds them from ListenFd
	// on, and the app finds them through LISTEN_FDS, LISTEN_PID and
	// LISTEN_FDNAMES (listen.go). PID 1 sets it when it starts the app's
	// own process; it is not part of the spec the host side builds.
	Listen []string `json:"listen,omitempty"`
}

// ConsolePts is where PID 1's root holds the devpts instance of an
// interactive pod's console: the set-up of the pod's app copies it onto
// the app's /dev/pts (Spec.ConsolePts).
const ConsolePts = "/pod1-console-pts"

// Mount kinds.
const (
	// KindProc mounts a procfs of the apps' pid namespace (AppsProc).
	KindProc = "proc"
	// KindSys mounts a sysfs, read-only when ReadOnly is set.
	KindSys = "sysfs"
	// KindDev mounts a fresh tmpfs /dev with the standard device nodes,
	// devpts, mqueue and the shm directory.
	KindDev = "dev"
	// KindPodShm attaches a copy of the pod's /dev/shm (PodShm), which
	// the pod's apps share, at Target.
	KindPodShm = "podshm"
	// KindBind bind-mounts Source (a path in the pod's mount namespace).
	KindBind = "bind"
)

// Mount is one mount in the app's root.
type Mount struct {
	Kind     string `json:"kind"`
	Source   string `json:"source,omitempty"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// File is set when Source is not a directory, so the target is
	// created as an empty file.
	File bool `json:"file,omitempty"`
	// Optional mounts are skipped, with a warning, when the target's
	// last component is a symlink in the image (/etc/hosts -> ...).
	Optional bool `json:"optional,omitempty"`
	// IfSource mounts are skipped when their source does not exist: a
	// file the stage1 writes only in some cases (the resolv.conf of a
	// network's DNS answer).
	IfSource bool `json:"ifSource,omitempty"`
	// SourceDev and SourceIno, when set, are the identity Source had when
	// the pod was loaded: a bind whose source has changed is refused.
	SourceDev uint64 `json:"sourceDev,omitempty"`
	SourceIno uint64 `json:"sourceIno,omitempty"`
	// NoRecursive binds the source alone, not the mounts below it (a
	// volume's recursive=false).
	NoRecursive bool `json:"noRecursive,omitempty"`
	// IfMissing binds only when the image has nothing at the target (the
	// generated /etc/hosts is a fallback: the image's own wins, as in rkt).
	IfMissing bool `json:"ifMissing,omitempty"`
	// InPlace binds the target onto itself: the image's own directory
	// becomes a mount point of its own (an implicit volume of a
	// Docker-converted image, initialised with the image's files). Source
	// is unused.
	InPlace bool `json:"inPlace,omitempty"`
	// Device is set when Source is a device node on the host (a device
	// volume): read-only, it keeps its device semantics (no nodev), as
	// the app's device allow-list names it.
	Device bool `json:"device,omitempty"`
}
