package pods

import "errors"

// Sentinel errors callers tell apart.
var (
	// ErrNotFound means no pod has the UUID (or UUID prefix).
	ErrNotFound = errors.New("pod not found")
	// ErrAmbiguous means a UUID prefix matches more than one pod.
	ErrAmbiguous = errors.New("ambiguous UUID prefix")
	// ErrNotReady means a pod finished before its supervisor was ready.
	ErrNotReady = errors.New("pod finished without becoming ready")
)
