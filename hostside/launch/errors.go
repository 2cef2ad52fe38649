package launch

import "errors"

// Sentinel errors for the refusals callers may want to tell apart.
var (
	// ErrNoStage1 means no stage1 image was given.
	ErrNoStage1 = errors.New("no stage1 image given")
	// ErrNoApps means no app image was given.
	ErrNoApps = errors.New("no app image given")
	// ErrInteractiveApps means --interactive was asked for several apps.
	ErrInteractiveApps = errors.New("interactive mode supports only one app")
	// ErrDuplicateApp means two apps have the same name.
	ErrDuplicateApp = errors.New("duplicate app name")
	// ErrNameCollision means an app name equals another app's status
	// marker name.
	ErrNameCollision = errors.New("name collides with the status markers of app")
	// ErrNoEntrypoint means the stage1 manifest lacks the run annotation.
	ErrNoEntrypoint = errors.New("no coreos.com/rkt/stage1/run annotation")
	// ErrNoExec means an app would have nothing to execute.
	ErrNoExec = errors.New("image has no exec and --exec is not given")
	// ErrUnknownVolume means a --mount names a volume no --volume defines.
	ErrUnknownVolume = errors.New("no such volume")
	// ErrEscape means a path resolved outside the tree it must stay in.
	ErrEscape = errors.New("path resolves outside its root")
	// ErrMountsLeft means mounts under a pod dir could not all be removed,
	// so the directory was kept rather than deleted through them.
	ErrMountsLeft = errors.New("mounts remain under the pod directory")
	// ErrOverlayPath means a path cannot be written into overlayfs mount
	// options.
	ErrOverlayPath = errors.New("overlayfs options cannot carry ',', ':' or '\\' in paths")
)
