package podspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/appc/spec/schema/types"
	"github.com/appc/spec/schema/types/resource"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/appexec/seccomp"
	"github.com/pod1/pod1/cgroups"
)

// Bounds of the resource isolators. Below MinMemory the stage1's own
// setup of the app could not run inside the limit; below MinCPUMilli the
// CFS quota would be under the kernel's minimum of 1ms per 100ms period.
const (
	MinMemory   = 4 << 20
	MaxMemory   = 1 << 62
	MinCPUMilli = 10
	MaxCPUs     = 1 << 20
)

// rawIsolator is an isolator as written in a manifest. The stage1 decodes
// isolators itself, before appc's decoder does, so that every error names
// the app, the isolator and the bound.
type rawIsolator struct {
	Name  string           `json:"name"`
	Value *json.RawMessage `json:"value"`
}

// unsupportedIsolators are defined by appc but not carried out by this
// stage1; running an app without the isolation it asks for would be
// silent, so they are refused.
var unsupportedIsolators = []string{
	types.ResourceBlockBandwidthName, types.ResourceBlockIOPSName,
	types.ResourceNetworkBandwidthName, types.LinuxSELinuxContextName,
	types.UnixSysctlName,
}

// isolation is an app's isolators, parsed.
type isolation struct {
	retain, remove []string
	nnp            bool
	seccomp        *seccomp.Filter
	seccompSet     bool
	oom            *int
	limits         cgroups.Limits
}

// parseIsolators checks and parses an app's isolators.
func parseIsolators(list []rawIsolator) (*isolation, error) {
	is := &isolation{}
	seen := map[string]bool{}
	for _, r := range list {
		if seen[r.Name] && !repeatable(r.Name) {
			return nil, fmt.Errorf("isolator %s: given more than once", r.Name)
		}
		seen[r.Name] = true
		if r.Value == nil {
			return nil, fmt.Errorf("isolator %s: value missing", r.Name)
		}
		if err := is.parse(r.Name, *r.Value); err != nil {
			return nil, fmt.Errorf("isolator %s: %w", r.Name, err)
		}
	}
	if seen[types.LinuxCapabilitiesRetainSetName] && seen[types.LinuxCapabilitiesRevokeSetName] {
		return nil, fmt.Errorf("isolators %s and %s: only one may be given", types.LinuxCapabilitiesRetainSetName, types.LinuxCapabilitiesRevokeSetName)
	}
	if seen[types.LinuxSeccompRetainSetName] && seen[types.LinuxSeccompRemoveSetName] {
		return nil, fmt.Errorf("isolators %s and %s: only one may be given", types.LinuxSeccompRetainSetName, types.LinuxSeccompRemoveSetName)
	}
	return is, nil
}

// repeatable reports whether an isolator may be given more than once, as
// rkt's stage0 does: `rkt run --memory/--cpu` append theirs after the
// image's, and the last one wins, as it does with rkt's stage1 (each value
// is still checked). no-new-privileges given twice is on if any says so, as
// rkt's stage1 reads it.
func repeatable(name string) bool {
	switch name {
	case types.ResourceMemoryName, types.ResourceCPUName, types.LinuxNoNewPrivilegesName:
		return true
	}
	return false
}

func (is *isolation) parse(name string, v json.RawMessage) error {
	switch name {
	case types.ResourceMemoryName:
		q, err := limitOf(v)
		if err != nil || q == nil {
			return err
		}
		if q.CmpInt64(MinMemory) < 0 || q.CmpInt64(MaxMemory) > 0 {
			return fmt.Errorf("limit must be between 4Mi and 4Ei bytes, got %s", q)
		}
		is.limits.MemoryMax = q.Value()
	case types.ResourceCPUName:
		q, err := limitOf(v)
		if err != nil || q == nil {
			return err
		}
		if q.CmpInt64(MaxCPUs) > 0 || q.MilliValue() < MinCPUMilli {
			return fmt.Errorf("limit must be between %dm and %d CPUs, got %s", MinCPUMilli, MaxCPUs, q)
		}
		is.limits.CPUMilli = q.MilliValue()
	case types.LinuxCPUSharesName:
		n, err := intIn(v, 2, 262144)
		is.limits.CPUShares = int64(n)
		return err
	case types.LinuxOOMScoreAdjName:
		n, err := intIn(v, -1000, 1000)
		is.oom = &n
		return err
	case types.LinuxNoNewPrivilegesName:
		var on bool
		if err := json.Unmarshal(v, &on); err != nil {
			return fmt.Errorf("want true or false: %w", err)
		}
		is.nnp = is.nnp || on
	case types.LinuxCapabilitiesRetainSetName, types.LinuxCapabilitiesRevokeSetName:
		set, err := capSet(v)
		if name == types.LinuxCapabilitiesRetainSetName {
			is.retain = set
		} else {
			is.remove = set
		}
		return err
	case types.LinuxSeccompRetainSetName, types.LinuxSeccompRemoveSetName:
		var s struct {
			Set   []string `json:"set"`
			Errno string   `json:"errno"`
		}
		if err := json.Unmarshal(v, &s); err != nil {
			return err
		}
		mode := seccomp.ModeAllow
		if name == types.LinuxSeccompRemoveSetName {
			mode = seccomp.ModeDeny
		}
		f, err := seccomp.Parse(mode, s.Set, s.Errno)
		is.seccomp, is.seccompSet = f, true
		return err
	default:
		if slices.Contains(unsupportedIsolators, name) {
			return errors.New("not supported by this stage1")
		}
		return errors.New("unknown isolator")
	}
	return nil
}

// limitOf reads a resource isolator's limit; nil when it has none (its
// request alone is not enforced, as in rkt).
func limitOf(v json.RawMessage) (*resource.Quantity, error) {
	var r struct {
		Default bool               `json:"default"`
		Limit   *resource.Quantity `json:"limit"`
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, err
	}
	if r.Default {
		return nil, errors.New("default must be false")
	}
	return r.Limit, nil
}

func intIn(v json.RawMessage, lo, hi int) (int, error) {
	var n int
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, fmt.Errorf("want an integer between %d and %d: %w", lo, hi, err)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
	}
	return n, nil
}

func capSet(v json.RawMessage) ([]string, error) {
	var s struct {
		Set []string `json:"set"`
	}
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, err
	}
	if len(s.Set) == 0 {
		return nil, errors.New("set must be non-empty")
	}
	for _, c := range s.Set {
		if _, err := appexec.ParseCapability(c); err != nil {
			return nil, err
		}
	}
	return appexec.SortCapabilities(s.Set), nil
}

// capabilities is the app's capability set: rkt's default, replaced by
// a retain-set, or reduced by a remove-set.
func (is *isolation) capabilities() []string {
	switch {
	case is.retain != nil:
		return is.retain
	case is.remove != nil:
		return appexec.SortCapabilities(slices.DeleteFunc(slices.Clone(appexec.DefaultCapabilities), func(c string) bool {
			return slices.Contains(is.remove, c)
		}))
	}
	return appexec.SortCapabilities(appexec.DefaultCapabilities)
}

// apply puts the isolation on the spec, as the stage1's flags allow.
func (is *isolation) apply(s *appexec.Spec, readOnlyRoot bool, opts *Options) error {
	s.Isolation = appexec.Isolation{
		Capabilities:             is.capabilities(),
		UnrestrictedCapabilities: opts.DisableCapabilities,
		NoNewPrivileges:          is.nnp,
		OOMScoreAdj:              is.oom,
	}
	switch {
	case opts.DisableSeccomp:
	case is.seccompSet:
		s.Isolation.Seccomp = is.seccomp
	default:
		f, err := seccomp.Default()
		if err != nil {
			return fmt.Errorf("default seccomp filter: %w (run with --disable-seccomp)", err)
		}
		s.Isolation.Seccomp = f
	}
	s.ReadOnlyRootFS = readOnlyRoot
	if opts.DisablePaths {
		for i := range s.Mounts {
			if s.Mounts[i].Kind == appexec.KindSys {
				s.Mounts[i].ReadOnly = false
			}
		}
		return nil
	}
	s.MaskedPaths = slices.Clone(appexec.DefaultMaskedPaths)
	s.ReadOnlyPaths = slices.Clone(appexec.DefaultReadOnlyPaths)
	return nil
}
