//go:build ignore

// rkt-apiclient asks a running `rkt api-service` for its pods, as rkt's
// clients (rktlet, cAdvisor's rkt handler) do: ListPods, with cgroup
// filters if given. It is built inside rkt's own source tree (the build
// folder of tools/rkt-stage0/build.sh, whose go.mod has rkt's gRPC and API
// packages), not with pod1's module: the tests build it on demand
// (tests/rkt_api_test.go). It prints one JSON object per pod.
//
// usage: rkt-apiclient ADDR [cgroup=PATH|subcgroup=PATH]...
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rkt/rkt/api/v1alpha"
	"golang.org/x/net/context"
	"google.golang.org/grpc"
)

type pod struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Pid    int32  `json:"pid"`
	Cgroup string `json:"cgroup"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rkt-apiclient ADDR [cgroup=PATH|subcgroup=PATH]...")
		os.Exit(2)
	}
	var f v1alpha.PodFilter
	filtered := false
	for _, a := range os.Args[2:] {
		switch {
		case strings.HasPrefix(a, "cgroup="):
			f.Cgroups = append(f.Cgroups, strings.TrimPrefix(a, "cgroup="))
		case strings.HasPrefix(a, "subcgroup="):
			f.PodSubCgroups = append(f.PodSubCgroups, strings.TrimPrefix(a, "subcgroup="))
		default:
			fmt.Fprintf(os.Stderr, "rkt-apiclient: unknown argument %q\n", a)
			os.Exit(2)
		}
		filtered = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.Dial(os.Args[1], grpc.WithInsecure(), grpc.WithBlock(), grpc.WithTimeout(30*time.Second))
	if err != nil {
		fmt.Fprintf(os.Stderr, "rkt-apiclient: dial %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	defer conn.Close()
	req := &v1alpha.ListPodsRequest{Detail: true}
	if filtered {
		req.Filters = []*v1alpha.PodFilter{&f}
	}
	resp, err := v1alpha.NewPublicAPIClient(conn).ListPods(ctx, req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rkt-apiclient: ListPods: %v\n", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, p := range resp.Pods {
		_ = enc.Encode(pod{ID: p.Id, State: p.State.String(), Pid: p.Pid, Cgroup: p.Cgroup})
	}
}
