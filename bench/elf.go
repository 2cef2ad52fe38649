package main

import (
	"encoding/binary"
	"os"
)

// The apps the peers run must be the same binary for every peer and must
// cost nothing themselves, so that what is measured is the runtime. Go
// binaries carry a runtime whose start (threads, heap) would swamp the
// floor, and a C toolchain is not something a fresh machine has. So the
// bench writes two tiny static x86-64 ELF executables itself: one
// PT_LOAD segment, no libc, a handful of instructions.

// codeTrue is /bin/true: exit_group(0).
//
//	31 ff             xor  %edi,%edi
//	b8 e7 00 00 00    mov  $231,%eax      # exit_group
//	0f 05             syscall
var codeTrue = []byte{0x31, 0xff, 0xb8, 0xe7, 0x00, 0x00, 0x00, 0x0f, 0x05}

// codeOrphan is the reaping benchmark's orphan: it blocks in read(0) until
// the release pipe is closed, writes its CLOCK_MONOTONIC exit time (16
// bytes, a struct timespec) to fd 1 and exits 0. Its last act before
// exit_group is that write, so the largest time read is the last exit.
//
//	48 83 ec 20       sub  $32,%rsp
//	31 c0             xor  %eax,%eax      # read
//	31 ff             xor  %edi,%edi      # fd 0
//	48 89 e6          mov  %rsp,%rsi
//	ba 01 00 00 00    mov  $1,%edx
//	0f 05             syscall
//	b8 e4 00 00 00    mov  $228,%eax      # clock_gettime
//	bf 01 00 00 00    mov  $1,%edi        # CLOCK_MONOTONIC
//	48 89 e6          mov  %rsp,%rsi
//	0f 05             syscall
//	b8 01 00 00 00    mov  $1,%eax        # write
//	bf 01 00 00 00    mov  $1,%edi        # fd 1
//	48 89 e6          mov  %rsp,%rsi
//	ba 10 00 00 00    mov  $16,%edx
//	0f 05             syscall
//	31 ff             xor  %edi,%edi
//	b8 e7 00 00 00    mov  $231,%eax      # exit_group
//	0f 05             syscall
var codeOrphan = []byte{
	0x48, 0x83, 0xec, 0x20,
	0x31, 0xc0,
	0x31, 0xff,
	0x48, 0x89, 0xe6,
	0xba, 0x01, 0x00, 0x00, 0x00,
	0x0f, 0x05,
	0xb8, 0xe4, 0x00, 0x00, 0x00,
	0xbf, 0x01, 0x00, 0x00, 0x00,
	0x48, 0x89, 0xe6,
	0x0f, 0x05,
	0xb8, 0x01, 0x00, 0x00, 0x00,
	0xbf, 0x01, 0x00, 0x00, 0x00,
	0x48, 0x89, 0xe6,
	0xba, 0x10, 0x00, 0x00, 0x00,
	0x0f, 0x05,
	0x31, 0xff,
	0xb8, 0xe7, 0x00, 0x00, 0x00,
	0x0f, 0x05,
}

// codeOrphanTimed is the other orphan: instead of waiting to be released
// it lives one second from its own start (nanosleep), then reports its
// exit time and exits like codeOrphan. Started one after the other, such
// orphans exit at the pace they were started, as a double-forking app's
// children do.
//
//	48 83 ec 20                sub   $32,%rsp
//	48 c7 04 24 01 00 00 00    movq  $1,(%rsp)          # tv_sec
//	48 c7 44 24 08 00 00 00 00 movq  $0,8(%rsp)         # tv_nsec
//	b8 23 00 00 00             mov   $35,%eax           # nanosleep
//	48 89 e7                   mov   %rsp,%rdi
//	31 f6                      xor   %esi,%esi
//	0f 05                      syscall
//	(then as codeOrphan from clock_gettime on)
var codeOrphanTimed = append([]byte{
	0x48, 0x83, 0xec, 0x20,
	0x48, 0xc7, 0x04, 0x24, 0x01, 0x00, 0x00, 0x00,
	0x48, 0xc7, 0x44, 0x24, 0x08, 0x00, 0x00, 0x00, 0x00,
	0xb8, 0x23, 0x00, 0x00, 0x00,
	0x48, 0x89, 0xe7,
	0x31, 0xf6,
	0x0f, 0x05,
}, codeOrphan[18:]...)

// codeReady is the scale benchmark's app: it writes one byte into
// /ready.fifo (the same FIFO, hard-linked into every app's root, so the
// bench reads one byte per running app) and then pauses until a signal
// ends it.
//
//	48 8d 3d 2c 00 00 00    lea  path(%rip),%rdi
//	be 01 00 00 00          mov  $1,%esi        # O_WRONLY
//	31 d2                   xor  %edx,%edx
//	b8 02 00 00 00          mov  $2,%eax        # open
//	0f 05                   syscall
//	89 c7                   mov  %eax,%edi
//	48 8d 35 15 00 00 00    lea  path(%rip),%rsi
//	ba 01 00 00 00          mov  $1,%edx
//	b8 01 00 00 00          mov  $1,%eax        # write
//	0f 05                   syscall
//	b8 22 00 00 00       1: mov  $34,%eax       # pause
//	0f 05                   syscall
//	eb f7                   jmp  1b
//	path: "/ready.fifo\0"
var codeReady = []byte{
	0x48, 0x8d, 0x3d, 0x2c, 0x00, 0x00, 0x00, 0xbe, 0x01, 0x00, 0x00, 0x00,
	0x31, 0xd2, 0xb8, 0x02, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x89, 0xc7, 0x48,
	0x8d, 0x35, 0x15, 0x00, 0x00, 0x00, 0xba, 0x01, 0x00, 0x00, 0x00, 0xb8,
	0x01, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f,
	0x05, 0xeb, 0xf7, '/', 'r', 'e', 'a', 'd', 'y', '.', 'f', 'i',
	'f', 'o', 0x00,
}

// tinyELF wraps code in a minimal ELF64 executable: the 64-byte file
// header, one 56-byte program header mapping the whole file read+exec at
// 0x400000, then the code.
func tinyELF(code []byte) []byte {
	const base, hdr = 0x400000, 64 + 56
	b := make([]byte, hdr, hdr+len(code))
	le := binary.LittleEndian
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1}) // 64-bit, little endian, version 1
	le.PutUint16(b[16:], 2)                       // ET_EXEC
	le.PutUint16(b[18:], 62)                      // EM_X86_64
	le.PutUint32(b[20:], 1)                       // EV_CURRENT
	le.PutUint64(b[24:], base+hdr)                // entry
	le.PutUint64(b[32:], 64)                      // program headers offset
	le.PutUint16(b[52:], 64)                      // header size
	le.PutUint16(b[54:], 56)                      // program header size
	le.PutUint16(b[56:], 1)                       // one program header
	ph := b[64:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // PF_R|PF_X
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], uint64(hdr+len(code)))
	le.PutUint64(ph[40:], uint64(hdr+len(code)))
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}

// writeTiny writes one of the tiny executables.
func writeTiny(path string, code []byte) error {
	return os.WriteFile(path, tinyELF(code), 0o755)
}
