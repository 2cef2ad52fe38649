//go:build linux && arm64

package seccomp

import "golang.org/x/sys/unix"

// nativeArch is the AUDIT_ARCH_* value the kernel reports for a system
// call of this architecture's native ABI.
const nativeArch = unix.AUDIT_ARCH_AARCH64

// x32Bit is zero: arm64 has no second ABI sharing its audit arch.
const x32Bit = 0

// supported reports whether filters can be built here.
const supported = true
