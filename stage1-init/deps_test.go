package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The stage1 binary (run, PID 1, the apps' first process, gc) must not
// link the CNI code: pods with --net=none or --net=host would pay for it
// at every start. Networking lives in net-setup, exec'd only for pods
// with networks.
func TestNoCNIInStage1Init(t *testing.T) {
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
	}
}
