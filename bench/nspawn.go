package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// rkt's default stage1 boots systemd in systemd-nspawn, with journald and
// one service per app. Debootstrapping an OS tree would take minutes and
// the network; instead the bench builds a tree of a few files whose /usr
// is the host's own, bind-mounted read-only by nspawn (Debian 12 is
// merged-/usr, so /bin, /sbin, /lib and /lib64 are symlinks into it). The
// host's systemd and journald boot in it; /etc holds only what systemd
// needs and the bench's units:
//
//	bench.target          the default target: the app service
//	bench-app.service     the app, like rkt's per-app units: no default
//	                      dependencies, after and requiring journald; its
//	                      end (success or failure) exits the container
//	                      (SuccessAction=exit), as rkt's reaper does with
//	                      `systemctl exit`; stopped (KillMode=mixed, as
//	                      rkt's) when the container shuts down.

// sdTree writes the tree for one app command and returns its root.
func (b *bench) sdTree(name string, exec []string, extra string) (string, error) {
	root := filepath.Join(b.work, "sdroot-"+name)
	for _, d := range []string{"usr", "etc/systemd/system", "var", "tmp", "run", "proc", "sys", "dev", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		if _, err := os.Lstat(filepath.Join("/", d)); err != nil {
			continue
		}
		if err := os.Symlink("usr/"+d, filepath.Join(root, d)); err != nil {
			return "", err
		}
	}
	for _, f := range []string{"true", "probe"} {
		if err := copyFile(filepath.Join(b.fixture, f), filepath.Join(root, f)); err != nil {
			return "", err
		}
	}
	// nspawn checks for an os-release before it mounts /usr.
	osr, err := os.ReadFile("/usr/lib/os-release")
	if err != nil {
		return "", fmt.Errorf("the host has no /usr/lib/os-release: %w", err)
	}
	files := map[string]string{
		"etc/os-release":                  string(osr),
		"etc/machine-id":                  "0123456789abcdef0123456789abcdef\n",
		"etc/passwd":                      "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                       "root:x:0:\nsystemd-journal:x:101:\n",
		"etc/systemd/system/bench.target": "[Unit]\nDescription=bench\nRequires=bench-app.service\nAfter=bench-app.service\n",
		"etc/systemd/system/bench-app.service": "[Unit]\nDescription=bench app\nDefaultDependencies=no\n" +
			"Requires=systemd-journald.service\nAfter=systemd-journald.service\n" +
			"Conflicts=shutdown.target\nBefore=shutdown.target\n" +
			"SuccessAction=exit\nFailureAction=exit\n\n" +
			"[Service]\nType=simple\nKillMode=mixed\nExecStart=" + strings.Join(exec, " ") + "\n" + extra,
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(root, n), []byte(c), 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Symlink("bench.target", filepath.Join(root, "etc/systemd/system/default.target")); err != nil {
		return "", err
	}
	return root, nil
}

// nspawnArgs is the common systemd-nspawn command line. The host runs no
// systemd, so there is no machined to register with and no unit manager
// to create a scope: --register=no --keep-unit. --private-network gives
// the container its own network namespace, as pod1's --net=none does.
func (b *bench) nspawnArgs(root string, extra ...string) []string {
	argv := []string{b.tools["systemd-nspawn"], "--quiet", "--register=no", "--keep-unit", "--private-network", "--directory=" + root}
	return append(argv, extra...)
}
