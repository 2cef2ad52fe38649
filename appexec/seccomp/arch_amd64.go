//go:build linux && amd64

package seccomp

import "golang.org/x/sys/unix"

// nativeArch is the AUDIT_ARCH_* value the kernel reports for a system
// call of this architecture's native ABI.
const nativeArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks a system call of the x32 ABI, which the kernel reports with
// the x86-64 audit arch: without a check for it, a filter written for
// x86-64 numbers is bypassed by calling the x32 number of the same call.
const x32Bit = 0x40000000

// supported reports whether filters can be built here.
const supported = true
