package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// pluginExec runs plugins as libcni's default executor does, but dies
// with us (a setup killed midway must not go on behind gc's back), and
// turns a plugin's failure into one line. The namespace reaches plugins
// as a path (CNI_NETNS, under /var/run/netns, a host directory the pod
// cannot write), not as an inherited descriptor: plugins that delegate
// (flannel, rkt's test proxy) run other plugins, which would not inherit
// it.
type pluginExec struct {
	debug bool
}

func (e *pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, pluginPath)
	// rkt's stage1 sets CNI_VERSION (to the only version it spoke);
	// plugins read the version from their configuration.
	cmd.Env = append(environ, "CNI_VERSION=0.1.0")
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if e.debug && stderr.Len() > 0 {
		_, _ = os.Stderr.Write(stderr.Bytes())
	}
	if err == nil {
		return stdout.Bytes(), nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return nil, err
	}
	var perr types.Error
	if json.Unmarshal(stdout.Bytes(), &perr) == nil && perr.Msg != "" {
		if perr.Details != "" {
			return nil, fmt.Errorf("%s; %s", perr.Msg, perr.Details)
		}
		return nil, errors.New(perr.Msg)
	}
	if msg := lastLine(stderr.String()); msg != "" {
		return nil, fmt.Errorf("plugin %s: %w: %s", pluginPath, err, msg)
	}
	return nil, fmt.Errorf("plugin %s: %w", pluginPath, err)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 300 {
		l = l[:300]
	}
	return l
}

func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	if !validPluginName(plugin) {
		return "", fmt.Errorf("plugin type %q is not a plain name", plugin)
	}
	for _, dir := range paths {
		p := dir + "/" + plugin
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("plugin %q not found in %s", plugin, strings.Join(paths, ":"))
}

func (e *pluginExec) Decode(b []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(b)
}

var _ invoke.Exec = (*pluginExec)(nil)
