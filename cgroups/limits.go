package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Limits are an app's resource isolators (contract §5), applied to its
// cgroup before its first process is moved in. Zero fields are unset.
type Limits struct {
	// MemoryMax is resource/memory's limit in bytes.
	MemoryMax int64 `json:"memoryMax,omitempty"`
	// CPUMilli is resource/cpu's limit in thousandths of a CPU: a CFS
	// quota of CPUMilli/1000 CPUs per period.
	CPUMilli int64 `json:"cpuMilli,omitempty"`
	// CPUShares is os/linux/cpu-shares, the weight under contention
	// (cpu.shares in v1, mapped onto cpu.weight in v2).
	CPUShares int64 `json:"cpuShares,omitempty"`
}

// CFSPeriod is the CFS period, in microseconds, the CPU quota is given
// for: the kernel's default and what systemd's CPUQuota= (which rkt used)
// writes.
const CFSPeriod = 100000

// Empty reports whether no limit is set.
func (l Limits) Empty() bool { return l == Limits{} }

// Controllers lists the controllers the limits need.
func (l Limits) Controllers() []string {
	var cs []string
	if l.MemoryMax > 0 {
		cs = append(cs, "memory")
	}
	if l.CPUMilli > 0 || l.CPUShares > 0 {
		cs = append(cs, "cpu")
	}
	return cs
}

// SetLimits writes the limits into the group: into the v1 memory and cpu
// hierarchies when the host has them (hybrid or legacy layout), else into
// the v2 files of a unified one. A limit that cannot be written is an
// error: an app must not run without the limit it asked for.
func (g *Group) SetLimits(l Limits) error {
	type write struct{ ctrl, v1, v2, v1val, v2val string }
	var ws []write
	if l.MemoryMax > 0 {
		v := strconv.FormatInt(l.MemoryMax, 10)
		ws = append(ws, write{"memory", "memory.limit_in_bytes", "memory.max", v, v})
	}
	if l.CPUMilli > 0 {
		quota := strconv.FormatInt(l.CPUMilli*CFSPeriod/1000, 10)
		period := strconv.Itoa(CFSPeriod)
		ws = append(ws, write{"cpu", "cpu.cfs_period_us", "", period, ""},
			write{"cpu", "cpu.cfs_quota_us", "cpu.max", quota, quota + " " + period})
	}
	if l.CPUShares > 0 {
		ws = append(ws, write{"cpu", "cpu.shares", "cpu.weight",
			strconv.FormatInt(l.CPUShares, 10), strconv.FormatInt(SharesToWeight(l.CPUShares), 10)})
	}
	for _, w := range ws {
		file, val, err := g.limitFile(w.ctrl, w.v1, w.v2)
		if err != nil {
			return err
		}
		if file == "" {
			continue
		}
		if val == "v1" {
			val = w.v1val
		} else {
			val = w.v2val
		}
		if err := writeFile(file, []byte(val)); err != nil {
			return fmt.Errorf("set %s to %s: %w", file, val, err)
		}
	}
	return nil
}

// limitFile picks where a controller's setting lives for this group, and
// which flavour ("v1" or "v2") of value it takes: the v1 hierarchy of the
// controller, or the v2 group when the layout is unified. An empty v2 name
// means the setting has no v2 file of its own.
func (g *Group) limitFile(ctrl, v1, v2 string) (file, flavour string, err error) {
	if d := g.V1[ctrl]; d != "" {
		return filepath.Join(d, v1), "v1", nil
	}
	if g.Unified && g.V2 != "" {
		if v2 == "" {
			return "", "", nil
		}
		return filepath.Join(g.V2, v2), "v2", nil
	}
	return "", "", fmt.Errorf("no %s controller: the host mounts no cgroup hierarchy with it", ctrl)
}

// Available reports whether the pod's cgroup, made by NewPod, can be
// limited with ctrl: a v1 hierarchy of the controller, or, on a unified
// layout, the root of the hierarchy offers it (NewPod enables it from the
// root down to the pod's cgroup, and says why if it cannot).
func (g *Group) Available(ctrl string) bool {
	if g.V1[ctrl] != "" {
		return true
	}
	if !g.Unified || g.V2 == "" {
		return false
	}
	mount, _, err := unifiedMount()
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	return err == nil && containsField(string(b), ctrl)
}

func containsField(s, f string) bool {
	for _, x := range strings.Fields(s) {
		if x == f {
			return true
		}
	}
	return false
}

// SharesToWeight maps cgroup v1 cpu.shares (default 1024) onto v2
// cpu.weight (1..10000, default 100) as systemd does for CPUShares= on a
// unified host (weight = shares * 100 / 1024, clamped): rkt's stage1 gave
// this isolator to systemd, and default shares must mean the default
// weight, or an app that asked for an even split would get less than its
// neighbours outside the pod. (The older linear map of runc and crun,
// 2..262144 onto 1..10000, turns the default 1024 into 39.)
func SharesToWeight(shares int64) int64 {
	w := shares * 100 / 1024
	return max(1, min(w, 10000))
}
