package launch

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/pod1/pod1/logx"
	"golang.org/x/sys/unix"
)

// Environment variables stage0 adds for the stage1 (rkt stage0/run.go).
const (
	envLockFd          = "RKT_LOCK_FD"
	envSELinux         = "RKT_SELINUX_CONTEXT"
	envSELinuxMount    = "RKT_SELINUX_MOUNT_CONTEXT"
	hostnameMinVersion = 2 // stage1 interface version that accepts --hostname
)

// stage1Argv builds the run entrypoint's command line in exactly the order
// rkt v1.30.0's stage0 Run uses, restricted to the flags pod1 supports.
// A stage1 parses these with Go's flag package and fails on anything
// unexpected, so order, spelling and presence all matter.
func stage1Argv(entrypoint string, o Options, version int, uuid string) []string {
	argv := []string{entrypoint}
	if o.Debug {
		argv = append(argv, "--debug")
	}
	argv = append(argv, "--net="+o.Net) // always, even when "default"
	if o.Interactive {
		argv = append(argv, "--interactive")
	}
	if o.PrivateUsers != nil {
		argv = append(argv, "--private-users="+o.PrivateUsers.String())
	}
	argv = append(argv, "--local-config="+o.LocalConfig)
	if o.Hostname != "" {
		// An interface-1 stage1 would reject the flag; rkt warns and
		// drops it, and so do we.
		if version < hostnameMinVersion {
			logx.Warnf("--hostname is not supported by stage1 interface version %d; ignored", version)
		} else {
			argv = append(argv, "--hostname="+o.Hostname)
		}
	}
	if mode, _ := o.DNS.resolvMode(); mode != "default" {
		// Checked when the options were; rkt passes the flag only
		// when a half differs from "default".
		if version < dnsConfModeMinVersion {
			logx.Warnf("--dns is not supported by stage1 interface version %d; ignored", version)
		} else {
			argv = append(argv, "--dns-conf-mode=resolv="+mode+",hosts=default")
		}
	}
	if o.Mutable {
		argv = append(argv, "--mutable")
	}
	return append(argv, uuid)
}

// stage1Env is the caller's environment plus rkt's three variables. Stale
// copies of those (say pod1 itself was started from a stage1) are dropped
// first so the stage1 sees exactly one, ours.
func stage1Env(environ []string, lockFd int) []string {
	env := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case envLockFd, envSELinux, envSELinuxMount:
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		envLockFd+"="+strconv.Itoa(lockFd),
		envSELinux+"=",
		envSELinuxMount+"=",
	)
}

// Exec replaces the current process with the stage1 run entrypoint, as rkt's
// stage0 does, so the pod's exit code becomes the caller's. It chdirs into
// the pod dir (stage1s use relative paths) and clears FD_CLOEXEC on the
// lock fd so the stage1 inherits the lock. It returns only on failure,
// with the lock fd made close-on-exec again; the pod is then still
// prepared and the caller should Abort it.
func (p *Prepared) Exec() error {
	if p.aborted {
		return fmt.Errorf("pod %s: exec after abort", p.UUID)
	}
	if err := os.Chdir(p.Dir); err != nil {
		return fmt.Errorf("pod %s: chdir: %w", p.UUID, err)
	}
	fd := p.Lock.Fd()
	if _, err := unix.FcntlInt(fd, unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("pod %s: clear close-on-exec on lock fd %d: %w", p.UUID, fd, err)
	}
	err := unix.Exec(p.Path, p.Argv, p.Env)
	// Only reached if exec failed: nothing we start later may inherit
	// the lock and keep the pod looking alive.
	_, _ = unix.FcntlInt(fd, unix.F_SETFD, unix.FD_CLOEXEC)
	return fmt.Errorf("pod %s: exec stage1 %s: %w", p.UUID, p.Argv[0], err)
}
