package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The host-side stage1 binary (run, gc and the other entry points) must
// not link the CNI code: pods with --net=none or --net=host would pay for
// it at every start. Networking lives in net-setup, exec'd only for pods
// with networks. Nor does it link PID 1 (its supervisor, reaper and pod
// set-up), a role it never plays: PID 1 is pod1-init.
func TestStage1InitDeps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/containernetworking/") || dep == "github.com/pod1/pod1/network" {
			t.Errorf("stage1-init links %s", dep)
		}
		switch dep {
		case "github.com/pod1/pod1/stage1-init/pid1", "github.com/pod1/pod1/supervisor",
			"github.com/pod1/pod1/reaper", "github.com/pod1/pod1/podenv":
			t.Errorf("stage1-init links PID 1's %s", dep)
		}
	}
}
