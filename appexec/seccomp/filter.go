// Package seccomp builds and installs an app's system call filter in pure
// Go: the rkt seccomp isolators (os/linux/seccomp-retain-set and
// -remove-set, with their errno) and the default filter an app gets when it
// names none, assembled by hand into classic BPF and installed with
// seccomp(2). There is no libseccomp: the stage1 is a static binary.
package seccomp

//go:generate go run ./internal/mksyscalls amd64 arm64

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Filter modes.
const (
	// ModeAllow lets only the listed calls through (a retain-set).
	ModeAllow = "allow"
	// ModeDeny refuses the listed calls and lets the rest through (a
	// remove-set).
	ModeDeny = "deny"
)

// Filter is a resolved filter: plain data, so it can cross from the run
// entry point to the app's process inside its Spec as JSON.
type Filter struct {
	Mode string `json:"mode"`
	// Syscalls are names of this architecture, wildcards expanded.
	Syscalls []string `json:"syscalls"`
	// Errno is what a refused call returns; 0 kills the process with
	// SIGSYS, rkt's behaviour when an isolator names no errno.
	Errno int `json:"errno,omitempty"`
}

// ErrUnsupported is returned on architectures the filter is not built for.
var ErrUnsupported = errors.New("seccomp filters are not supported on this architecture")

// Default is the filter of an app that names no seccomp isolator: rkt's
// default blacklist and its newer equivalents, refused with EPERM (as
// Docker does) rather than by killing the app. rkt's own default was its
// 2016 whitelist, which lacks calls every current libc makes (clone3,
// statx, rseq, close_range, faccessat2); refusing those breaks today's
// images, so the default blocks what rkt's whitelist was there to block.
func Default() (*Filter, error) {
	return Parse(ModeDeny, []string{"@pod1/default-blacklist"}, "EPERM")
}

// Parse resolves a seccomp isolator's set and errno. It returns nil, nil
// for a retain-set holding @appc.io/all (no filter at all), and the
// default filter for a remove-set holding @appc.io/empty (rkt did both).
// Every entry must be a system call of this architecture or a known
// wildcard; the errno, if any, a known errno name.
func Parse(mode string, set []string, errno string) (*Filter, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	if mode != ModeAllow && mode != ModeDeny {
		return nil, fmt.Errorf("unknown filter mode %q", mode)
	}
	if len(set) == 0 {
		return nil, errors.New("set must be non-empty")
	}
	f := &Filter{Mode: mode}
	if errno != "" {
		n, err := ErrnoNumber(errno)
		if err != nil {
			return nil, err
		}
		f.Errno = n
	}
	for _, e := range set {
		switch {
		case e == WildcardAll && mode == ModeAllow:
			return nil, nil
		case e == WildcardEmpty && mode == ModeDeny:
			return Default()
		case e == WildcardAll || e == WildcardEmpty:
			return nil, fmt.Errorf("%s in a %s-list would leave no system call to the app", e, mode)
		case strings.HasPrefix(e, "@systemd/"):
			return nil, fmt.Errorf("%s: the systemd groups need a systemd stage1; list the calls instead", e)
		case strings.HasPrefix(e, "@"):
			members, ok := wildcards[e]
			if !ok {
				return nil, fmt.Errorf("unknown wildcard %q", e)
			}
			for _, m := range members {
				if _, ok := syscallNumbers[m]; ok {
					f.Syscalls = append(f.Syscalls, m)
				}
			}
		default:
			if _, ok := syscallNumbers[e]; !ok {
				return nil, fmt.Errorf("unknown system call %q", e)
			}
			f.Syscalls = append(f.Syscalls, e)
		}
	}
	slices.Sort(f.Syscalls)
	f.Syscalls = slices.Compact(f.Syscalls)
	if mode == ModeDeny && slices.Contains(f.Syscalls, "execve") {
		return nil, errors.New("execve cannot be removed: the app itself is started with it")
	}
	return f, nil
}

// ErrnoNumber maps an errno name (EPERM, ENOSYS, ...) to its number.
func ErrnoNumber(name string) (int, error) {
	switch name {
	case "ENOTSUP":
		return int(unix.ENOTSUP), nil
	case "EWOULDBLOCK":
		return int(unix.EWOULDBLOCK), nil
	case "EDEADLOCK":
		return int(unix.EDEADLK), nil
	}
	for n := 1; n < 4096; n++ {
		if unix.ErrnoName(unix.Errno(n)) == name {
			return n, nil
		}
	}
	return 0, fmt.Errorf("unknown errno %q", name)
}

// Refuses reports whether the filter refuses the named call outright.
func (f *Filter) Refuses(name string) bool { return f.refuses(name) }

// refuses reports whether the filter refuses the named call outright.
func (f *Filter) refuses(name string) bool {
	listed := slices.Contains(f.Syscalls, name)
	return listed == (f.Mode == ModeDeny)
}
