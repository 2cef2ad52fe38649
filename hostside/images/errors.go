package images

import "errors"

// Sentinel errors, so callers and tests can tell refusal reasons apart with
// errors.Is instead of matching message text.
var (
	// ErrNotACI means the input does not have the ACI layout (a manifest
	// file and a rootfs directory, nothing else at the top level).
	ErrNotACI = errors.New("not an ACI")
	// ErrAbsolutePath means a tar entry name started with "/".
	ErrAbsolutePath = errors.New("absolute path in archive")
	// ErrDotDot means a tar entry name had a ".." component.
	ErrDotDot = errors.New(`".." component in archive path`)
	// ErrSpecialFile means a tar entry was a device node or FIFO, which pod1
	// does not create from untrusted images.
	ErrSpecialFile = errors.New("device nodes and FIFOs are not supported")
	// ErrUnsupportedEntry means a tar entry type pod1 does not know.
	ErrUnsupportedEntry = errors.New("unsupported tar entry type")
	// ErrTooLarge means the image unpacks to more than its Limits allow.
	ErrTooLarge = errors.New("image too large")
	// ErrCompression means the ACI uses a compression pod1 cannot read.
	ErrCompression = errors.New("unsupported compression")
)
