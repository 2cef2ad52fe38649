// Package podspec owns the validated description of a pod: it reads what
// rkt's stage0 left in the pod directory (the pod manifest, each app's
// image manifest and rootfs), checks all of it, and resolves it into the
// Pod that the stage1 carries out. Every error it returns names the field
// at fault, so the stage1 can refuse a bad pod with one line and exit 254
// before anything starts.
package podspec

import (
	"fmt"
	"time"

	"github.com/pod1/pod1/idmap"
	"github.com/pod1/pod1/podplan"
)

// The plan's types, resolved here and carried out by PID 1 (podplan).
type (
	Pod          = podplan.Pod
	App          = podplan.App
	LogSinks     = podplan.LogSinks
	VolumeSource = podplan.VolumeSource
	Stdio        = podplan.Stdio
	Supervision  = podplan.Supervision
	SharedVolume = podplan.SharedVolume
)

// DefaultGracePeriod is how long apps get between SIGTERM and SIGKILL when
// the pod stops.
const DefaultGracePeriod = 10 * time.Second

// Options are the stage1 flags that shape the pod (contract §2).
type Options struct {
	UUID        string
	Debug       bool
	Net         []string
	Interactive bool
	// Console: with Interactive, the caller's stdin is a terminal
	// (podplan.Pod.Console). A fact of the run's start, not an option:
	// not saved with them (saveOptions).
	Console  bool `json:"-"`
	Hostname string
	// ResolvMode and HostsMode are the two halves of --dns-conf-mode.
	ResolvMode string
	HostsMode  string
	IPC        string
	Mutable    bool
	MDSToken   string
	// Insecure options (--disable-*): the isolators and defaults they
	// turn off are still validated, then not applied.
	DisableCapabilities bool
	DisablePaths        bool
	DisableSeccomp      bool
	// PrivateUsers is --private-users: every app gets a user namespace
	// with this mapping.
	PrivateUsers *idmap.Range `json:",omitempty"`
}

// MetadataURL is the apps' AC_METADATA_URL for --mds-token, as rkt's
// stage1 makes it, when the pod shares the host's network: the metadata
// service's port at 127.0.0.1. A pod with networks of its own reaches the
// host at its forwarding network's gateway, which only the network setup
// knows (the run entry point sets it then, with MetadataURLAt).
func MetadataURL(o *Options) string {
	if o.MDSToken == "" || !o.NetHost() {
		return ""
	}
	return MetadataURLAt("127.0.0.1", o.MDSToken)
}

// MetadataURLAt is the metadata service's URL for token at the host
// address ip (rkt's port, 18112).
func MetadataURLAt(ip, token string) string {
	return "http://" + ip + ":18112/" + token
}

// NetHost reports whether the pod stays in the host's network namespace.
func (o *Options) NetHost() bool {
	for _, n := range o.Net {
		if n == "host" {
			return true
		}
	}
	return false
}

// fieldError is a validation failure of one field.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

func errorf(field, format string, a ...any) error {
	return &fieldError{field: field, err: fmt.Errorf(format, a...)}
}
