//go:build linux && !amd64 && !arm64

package seccomp

// Filters are built for amd64 and arm64 only; elsewhere every filter is
// refused when the pod is validated, never silently skipped.
const (
	nativeArch = 0
	x32Bit     = 0
	supported  = false
)

var syscallNumbers = map[string]uint32{}
