package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The start-path binary (PID 1 and the apps' set-up) links none of what only run and the host side
// need: the manifest schema and its dependencies, netlink, a BPF library,
// CNI, the flag library. Each was initialised at every pod start, in
// PID 1 and in every app's set-up process, and kept PID 1's memory up
// (docs/design-start.md).
func TestLeanInitDeps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v %s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, bad := range []string{
			"github.com/appc/", "github.com/pod1/pod1/podspec", "gopkg.in/inf.v0", "github.com/coreos/go-semver",
			"github.com/vishvananda/", "github.com/cilium/", "github.com/containernetworking/",
			"github.com/pod1/pod1/network", "github.com/pod1/pod1/hostside", "github.com/spf13/pflag",
			// The stage1's host side: run and the other entry points.
			"github.com/pod1/pod1/stage1-init/podstart", "github.com/pod1/pod1/stage1-init/entry",
			"github.com/pod1/pod1/stage1-init/netexec",
			"github.com/godbus/", "github.com/pod1/pod1/machined",
		} {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("pod1-init links %s", dep)
			}
		}
	}
	if len(deps) < 10 {
		t.Fatalf("go list -deps: only %q", deps)
	}
}
