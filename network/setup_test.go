package network

import (
	"errors"
	"reflect"
	"testing"

	"github.com/pod1/pod1/network/netinfo"
)

// The network's arguments reach plugins that know only some of the keys
// (macvlan knows MAC, not IP): IgnoreUnknown=1 comes first unless given.
func TestRuntimeConfArgs(t *testing.T) {
	for _, c := range []struct {
		args string
		want [][2]string
	}{
		{"", nil},
		{"IP=10.1.2.3", [][2]string{{"IgnoreUnknown", "1"}, {"IP", "10.1.2.3"}}},
		{"IP=10.1.2.3;ignoreunknown=0", [][2]string{{"IP", "10.1.2.3"}, {"ignoreunknown", "0"}}},
	} {
		rt := runtimeConf(&netinfo.NetInfo{Args: c.args, IfName: "eth0"}, "6f0e8a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b")
		if !reflect.DeepEqual(rt.Args, c.want) {
			t.Errorf("args %q: CNI_ARGS %v, want %v", c.args, rt.Args, c.want)
		}
		if rt.NetNS != "/var/run/netns/cni-6f0e8a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b" {
			t.Errorf("CNI_NETNS %q", rt.NetNS)
		}
	}
}

// host-local's refusal of a taken address is told in rkt's words.
func TestIPTaken(t *testing.T) {
	ip, ok := ipTaken(errors.New("failed to allocate for range 0: requested IP address 172.16.28.5 is not available in range set 172.16.28.1-172.16.28.254"))
	if !ok || ip != "172.16.28.5" {
		t.Errorf("got %q %v", ip, ok)
	}
	if _, ok := ipTaken(errors.New("requested IP address 10.9.9.9 is not in any range")); ok {
		t.Error("an address out of range taken for a taken one")
	}
}
