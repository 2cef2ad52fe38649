package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// ociConfig is the OCI runtime spec `crun spec` writes, with the process
// and root pointed at the fixture: the same namespaces as a pod1 pod with
// --net=none (pid, mount, ipc, uts, network), the same /proc, /dev, /sys
// mounts, and the runtime's defaults for everything else.
func ociConfig(rootfs string, args []string) map[string]any {
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
		"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
		"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	return map[string]any{
		"ociVersion": "1.0.0",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]any{"uid": 0, "gid": 0},
			"args":     args,
			"env":      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"},
			"cwd":      "/",
			"capabilities": map[string]any{
				"bounding": caps, "effective": caps, "inheritable": []string{}, "permitted": caps, "ambient": []string{},
			},
			"rlimits":         []any{map[string]any{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": rootfs, "readonly": false},
		"hostname": "bench",
		"mounts": []any{
			map[string]any{"destination": "/proc", "type": "proc", "source": "proc"},
			map[string]any{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			map[string]any{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			map[string]any{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			map[string]any{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": []string{"nosuid", "noexec", "nodev"}},
			map[string]any{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		"linux": map[string]any{
			"resources": map[string]any{"devices": []any{map[string]any{"allow": false, "access": "rwm"}}},
			"namespaces": []any{
				map[string]any{"type": "pid"}, map[string]any{"type": "network"},
				map[string]any{"type": "ipc"}, map[string]any{"type": "uts"}, map[string]any{"type": "mount"},
			},
			"maskedPaths": []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// bundle writes an OCI bundle for args and returns its directory.
func (b *bench) bundle(name string, args []string) (string, error) {
	dir := filepath.Join(b.work, "bundles", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(ociConfig(b.fixture, args), "", "  ")
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}

var ctrSeq atomic.Int64

// ctrID names a container uniquely for this bench run.
func ctrID(peer string) string {
	return fmt.Sprintf("pod1-bench-%d-%s-%d", os.Getpid(), peer, ctrSeq.Add(1))
}

// ociForget makes sure a container is gone from the runtime's state (crun
// run and runc run delete it themselves when it exits; this covers a
// round killed on timeout).
func (b *bench) ociForget(tool, id string) {
	if b.tools[tool] == "" {
		return
	}
	_, _ = quiet(10*time.Second, b.tools[tool], "delete", "--force", id)
	if left := cgroupsNamed(id); len(left) > 0 {
		for _, d := range left {
			if err := removeCgroupTree(d); err != nil {
				b.leftovers = append(b.leftovers, err.Error())
			}
		}
	}
}
