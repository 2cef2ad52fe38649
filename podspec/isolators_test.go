package podspec

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/pod1/pod1/appexec"
	"github.com/pod1/pod1/appexec/seccomp"
)

func raw(t *testing.T, name string, v any) rawIsolator {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	m := json.RawMessage(b)
	return rawIsolator{Name: name, Value: &m}
}

// The capability set is rkt's default, replaced by a retain-set or reduced
// by a remove-set; the insecure flags turn isolation off but still
// validate it.
func TestIsolationApply(t *testing.T) {
	is, err := parseIsolators([]rawIsolator{raw(t, "os/linux/capabilities-remove-set", map[string]any{"set": []string{"CAP_KILL", "CAP_SYS_ADMIN"}})})
	if err != nil {
		t.Fatal(err)
	}
	var s appexec.Spec
	s.Mounts = []appexec.Mount{{Kind: appexec.KindSys, Target: "/sys", ReadOnly: true}}
	if err := is.apply(&s, true, &Options{}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(s.Isolation.Capabilities, "CAP_KILL") || len(s.Isolation.Capabilities) != len(appexec.DefaultCapabilities)-1 {
		t.Errorf("remove-set: %v", s.Isolation.Capabilities)
	}
	if s.Isolation.Seccomp == nil || s.Isolation.Seccomp.Mode != seccomp.ModeDeny || !s.ReadOnlyRootFS || len(s.MaskedPaths) == 0 {
		t.Errorf("defaults: %+v", s)
	}
	var open appexec.Spec
	open.Mounts = []appexec.Mount{{Kind: appexec.KindSys, Target: "/sys", ReadOnly: true}}
	if err := is.apply(&open, false, &Options{DisableCapabilities: true, DisablePaths: true, DisableSeccomp: true}); err != nil {
		t.Fatal(err)
	}
	if !open.Isolation.UnrestrictedCapabilities || open.Isolation.Seccomp != nil || len(open.MaskedPaths) != 0 || open.Mounts[0].ReadOnly {
		t.Errorf("insecure options: %+v", open)
	}
}

func TestParseIsolatorsLimits(t *testing.T) {
	is, err := parseIsolators([]rawIsolator{
		raw(t, "resource/memory", map[string]any{"request": "1Gi", "limit": "64M"}),
		raw(t, "resource/cpu", map[string]any{"limit": "1500m"}),
		raw(t, "os/linux/cpu-shares", 2048),
		raw(t, "os/linux/oom-score-adj", -17),
	})
	if err != nil {
		t.Fatal(err)
	}
	if is.limits.MemoryMax != 64000000 || is.limits.CPUMilli != 1500 || is.limits.CPUShares != 2048 || *is.oom != -17 {
		t.Errorf("limits %+v oom %d", is.limits, *is.oom)
	}
	// A request alone sets no limit, as in rkt.
	is, err = parseIsolators([]rawIsolator{raw(t, "resource/memory", map[string]any{"request": "1Gi"})})
	if err != nil || !is.limits.Empty() {
		t.Errorf("request only: %+v %v", is, err)
	}
	_, err = parseIsolators([]rawIsolator{raw(t, "resource/cpu", map[string]any{"limit": "5m"})})
	if err == nil || !strings.Contains(err.Error(), "isolator resource/cpu: limit must be between 10m and 1048576 CPUs, got 5m") {
		t.Errorf("cpu bound: %v", err)
	}
}
