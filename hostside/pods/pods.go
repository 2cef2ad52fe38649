// Package pods reads pod directories from the host the way rkt v1.30.0
// does (contract §4, §6), for pods made by rkt's stage0 and by `pod1 run`
// alike: a pod's state is the directory it is in plus a non-blocking
// shared-lock test; its times are the mtimes of pod-created and pid/ppid
// and, once marked as garbage, the ctime of its directory; its apps' exit
// codes are the status files its stage1 wrote (in the overlay's upper
// directory when the stage1 rootfs is an overlay), completed by the JSON
// records pod1's stage1 writes beside them.
//
// Reading never takes the exclusive lock and never blocks on a running pod.
// Every file of a pod is read through the directory fd the lock was tested
// on, so a pod renamed by a concurrent gc (run -> exited-garbage) is read
// consistently, as rkt's status does.
package pods

import (
	"encoding/json"
	"time"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// State is a pod's lifecycle state, named as rkt's pkg/pod names it.
type State string

// The states, as rkt names them (Documentation/devel/pod-lifecycle.md).
const (
	Embryo         State = "embryo"
	Preparing      State = "preparing"
	AbortedPrepare State = "aborted prepare"
	Prepared       State = "prepared"
	Running        State = "running"
	Exited         State = "exited"
	ExitedDeleting State = "exited deleting"
	ExitedGarbage  State = "exited garbage"
	Deleting       State = "deleting"
	Garbage        State = "garbage"
)

// Include selects pods/ subdirectories.
type Include uint8

// The pods/ subdirectories, in lifecycle order: a pod found in two of them
// during a rename is taken from the earlier one, as rkt does.
const (
	IncludeEmbryo Include = 1 << iota
	IncludePrepare
	IncludePrepared
	IncludeRun
	IncludeExitedGarbage
	IncludeGarbage

	// IncludeMost is what `rkt list` and UUID prefixes look at.
	IncludeMost = IncludePrepare | IncludePrepared | IncludeRun | IncludeExitedGarbage
	// IncludeAll is every directory.
	IncludeAll = IncludeMost | IncludeEmbryo | IncludeGarbage
)

// Detail says how much of a pod to read.
type Detail uint8

const (
	// Full reads everything Pod holds.
	Full Detail = iota
	// Summary reads what `list`'s table shows and no more: the state,
	// Created, Started, Networks, and each app's Name, ImageID and
	// ImageName, with ManifestErr as Full sets it (the manifest is
	// decoded and checked the same way). Everything else stays zero: a
	// list of a thousand pods then opens five files a pod instead of
	// ten.
	Summary
)

// stateDir is one pods/ subdirectory and the state its pods are in when
// their lock is held and when it is free.
type stateDir struct {
	name             string
	kind             Include
	locked, unlocked State
	// lockMeaningless: rkt does not test the lock there (embryo,
	// prepared), so neither do we.
	lockMeaningless bool
}

var stateDirs = []stateDir{
	{layout.PodsEmbryo, IncludeEmbryo, Embryo, Embryo, true},
	{layout.PodsPrepare, IncludePrepare, Preparing, AbortedPrepare, false},
	{layout.PodsPrepared, IncludePrepared, Prepared, Prepared, true},
	{layout.PodsRun, IncludeRun, Running, Exited, false},
	{layout.PodsExitedGarbage, IncludeExitedGarbage, ExitedDeleting, ExitedGarbage, false},
	{layout.PodsGarbage, IncludeGarbage, Deleting, Garbage, false},
}

// AppState is an app's state in rkt's API (api/v1).
type AppState string

// The app states.
const (
	AppUnknown AppState = "unknown"
	AppCreated AppState = "created"
	AppRunning AppState = "running"
	AppExited  AppState = "exited"
)

// Pod is what the host can tell about a pod.
type Pod struct {
	UUID string
	// Dir is where the pod was found; it may have moved since.
	Dir   string
	State State
	// Created is the mtime of pod-created (zero before the pod is
	// prepared). Started is the mtime of pid or ppid (zero until the
	// pod runs). GCMarked is the ctime of the pod directory once it is
	// in garbage/ or exited-garbage/.
	Created, Started, GCMarked time.Time
	// Pid is the pid (or ppid) file's content, 0 when there is none.
	Pid int
	// Networks are net-info.json's entries, read while running.
	Networks []Network
	// Mutable is set for pods made by `rkt app sandbox`.
	Mutable bool
	// Overlay is set when the pod's trees are overlays; the stage1's
	// files are then read from the overlay's upper directory.
	Overlay bool
	// Stage1TreeStoreID names the stage1 image's tree.
	Stage1TreeStoreID string
	// Apps are the apps of the pod manifest, in order (none while the
	// manifest is not available).
	Apps []App
	// UserAnnotations and UserLabels come from the pod manifest.
	UserAnnotations map[string]string
	UserLabels      map[string]string
	// ManifestErr is why the pod manifest could not be read, for a pod
	// whose manifest should be there.
	ManifestErr error

	statusDir string // relative to the pod dir
}

// Network is one entry of net-info.json, kept verbatim for JSON output.
type Network struct {
	Name string
	IP   string
	Raw  json.RawMessage
}

// App is one app of a pod.
type App struct {
	Name    string
	ImageID string
	// ImageName is the app image's name, ":<version label>" appended
	// when it has one; "" when its manifest cannot be read.
	ImageName string
	State     AppState
	// CreatedAt, StartedAt, FinishedAt and ExitCode follow rkt's rules
	// (lib/app.go): for an immutable pod they are the pod's times and the
	// status file's code.
	CreatedAt, StartedAt, FinishedAt *time.Time
	// ExitCode is nil while the app has no valid status file.
	ExitCode *int
	Mounts   []Mount
	// UserAnnotations and UserLabels come from the app's section of the
	// pod manifest.
	UserAnnotations map[string]string
	UserLabels      map[string]string
	// Record is the JSON record pod1's stage1 keeps for the app (nil for
	// other stage1s, or before the app first started).
	Record *status.Record
}

// Mount is one volume of an app, as rkt's API shows it.
type Mount struct {
	Name          string
	ContainerPath string
	HostPath      string
	ReadOnly      bool
}

// IsAfterRun reports whether the pod is past running (rkt IsAfterRun).
func (p *Pod) IsAfterRun() bool {
	switch p.State {
	case Exited, ExitedGarbage, ExitedDeleting, Deleting, Garbage:
		return true
	}
	return false
}

// IsFinished reports whether the pod is in a terminal state (rkt
// IsFinished): what `status --wait` waits for.
func (p *Pod) IsFinished() bool {
	switch p.State {
	case Exited, ExitedGarbage, AbortedPrepare, Garbage:
		return true
	}
	return false
}

// StatusDir is the host path of the pod's status directory: with an
// overlay stage1 rootfs, in the overlay's upper directory, which is there
// even after the overlay was unmounted (contract §4).
func (p *Pod) StatusDir() string {
	if p.statusDir == "" {
		return p.Dir + "/" + layout.StatusDir
	}
	return p.Dir + "/" + p.statusDir
}
