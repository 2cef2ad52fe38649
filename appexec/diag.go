package appexec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// notFoundError is a failed exec's ENOENT told as rkt's stage1 tells it
// (TestDiagnostic in rkt's suite): the file that is missing, the
// executable itself or the interpreter it names, rather than execve's
// "no such file", which does not say which. When the missing file is an
// interpreter, the executable that needs it is named too: the interpreter
// alone did not say which of an image's scripts to fix.
type notFoundError struct{ path, exe string }

func (e *notFoundError) Error() string {
	msg := fmt.Sprintf("Error: Unable to open %q: No such file or directory", e.path)
	if e.exe != "" && e.exe != e.path {
		msg += fmt.Sprintf(" (the interpreter of %q)", e.exe)
	}
	return msg
}

func (e *notFoundError) Unwrap() error { return unix.ENOENT }

// missingFile is the first file of argv0's chain (argv0, the interpreter
// it names, that one's...) that does not exist, or "". Exec asks before
// the app's seccomp filter is in: after it, a strict filter could kill
// the process for the stat that explains a failed execve.
func missingFile(argv0 string) string {
	p := argv0
	for depth := 0; depth < 4; depth++ {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); errors.Is(err, unix.ENOENT) {
			return p
		} else if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return ""
		}
		if p = interpreterOf(p); p == "" {
			return ""
		}
	}
	return ""
}

// interpreterOf reads the interpreter p names: its "#!" line's, or its
// ELF program interpreter (the dynamic loader), or "". It reads at most
// a few pages of p, which is the image's and may be anything.
func interpreterOf(p string) string {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var hdr [64]byte
	if n, _ := unix.Pread(fd, hdr[:], 0); n < 4 {
		return ""
	}
	if hdr[0] == '#' && hdr[1] == '!' {
		line := make([]byte, 256)
		n, _ := unix.Pread(fd, line, 2)
		line = line[:max(n, 0)]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		if f := bytes.Fields(line); len(f) > 0 {
			return string(f[0])
		}
		return ""
	}
	// ELF64, little-endian (amd64, arm64): the PT_INTERP segment.
	if !bytes.Equal(hdr[:4], []byte("\x7fELF")) || hdr[4] != 2 || hdr[5] != 1 {
		return ""
	}
	le := binary.LittleEndian
	phoff := le.Uint64(hdr[32:])
	phentsize := uint64(le.Uint16(hdr[54:]))
	phnum := min(uint64(le.Uint16(hdr[56:])), 64)
	if phentsize < 56 || phoff > 1<<20 {
		return ""
	}
	const ptInterp = 3
	for i := uint64(0); i < phnum; i++ {
		var ph [56]byte
		if n, _ := unix.Pread(fd, ph[:], int64(phoff+i*phentsize)); n != len(ph) {
			return ""
		}
		if le.Uint32(ph[0:]) != ptInterp {
			continue
		}
		off, size := le.Uint64(ph[8:]), le.Uint64(ph[32:])
		if size == 0 || size > 4096 || off > 1<<30 {
			return ""
		}
		b := make([]byte, size)
		if n, _ := unix.Pread(fd, b, int64(off)); uint64(n) != size {
			return ""
		}
		return string(bytes.TrimRight(b, "\x00"))
	}
	return ""
}
