package network

import (
	"reflect"
	"testing"

	"github.com/pod1/pod1/network/netinfo"
)

// What iptables -t nat -S prints of two pods' forwards (portmap v1.10.0,
// iptables 1.8.9 nf_tables), one with a host address, beside a rule of
// another runtime whose container ID is no UUID and ptp's masquerade.
const natRules = `-P PREROUTING ACCEPT
-N CNI-DN-33c1559fb42ef77800aa1
-N CNI-DN-0ce587097fe49615b54f3
-N CNI-DN-other
-A POSTROUTING -s 172.16.28.40/32 -m comment --comment "name: \"default\" id: \"edd46223-4c18-46d9-ae49-e3c802121f9b\"" -j CNI-9bbc0686b181dd86187ea835
-A CNI-DN-33c1559fb42ef77800aa1 -s 172.16.28.0/24 -p tcp -m tcp --dport 39123 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-33c1559fb42ef77800aa1 -s 127.0.0.1/32 -p tcp -m tcp --dport 39123 -j CNI-HOSTPORT-SETMARK
-A CNI-DN-33c1559fb42ef77800aa1 -p tcp -m tcp --dport 39123 -j DNAT --to-destination 172.16.28.40:8080
-A CNI-DN-33c1559fb42ef77800aa1 -p udp -m udp --dport 53 -j DNAT --to-destination 172.16.28.40:53
-A CNI-DN-0ce587097fe49615b54f3 -d 127.0.0.1/32 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.16.28.41:80
-A CNI-DN-other -p tcp -m tcp --dport 39123 -j DNAT --to-destination 10.88.0.2:80
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"default-portmap\" id: \"edd46223-4c18-46d9-ae49-e3c802121f9b\"" -m multiport --dports 39123 -j CNI-DN-33c1559fb42ef77800aa1
-A CNI-HOSTPORT-DNAT -p udp -m comment --comment "dnat name: \"default-portmap\" id: \"edd46223-4c18-46d9-ae49-e3c802121f9b\"" -m multiport --dports 53 -j CNI-DN-33c1559fb42ef77800aa1
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"br-portmap\" id: \"4da21cf6-e3fa-4803-90d7-d1fa525214be\"" -m multiport --dports 8080 -j CNI-DN-0ce587097fe49615b54f3
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"podman\" id: \"0123456789abcdef\"" -m multiport --dports 39123 -j CNI-DN-other
`

func TestParseForwards(t *testing.T) {
	got := parseForwards("iptables", []byte(natRules))
	want := []hostForward{{
		cmd: "iptables", chain: "CNI-DN-33c1559fb42ef77800aa1", owner: "edd46223-4c18-46d9-ae49-e3c802121f9b",
		jumps: [][]string{
			{"-p", "tcp", "-m", "comment", "--comment", `dnat name: "default-portmap" id: "edd46223-4c18-46d9-ae49-e3c802121f9b"`, "-m", "multiport", "--dports", "39123", "-j", "CNI-DN-33c1559fb42ef77800aa1"},
			{"-p", "udp", "-m", "comment", "--comment", `dnat name: "default-portmap" id: "edd46223-4c18-46d9-ae49-e3c802121f9b"`, "-m", "multiport", "--dports", "53", "-j", "CNI-DN-33c1559fb42ef77800aa1"},
		},
		ports: []netinfo.PortMapping{{HostPort: 39123, Protocol: "tcp"}, {HostPort: 53, Protocol: "udp"}},
	}, {
		cmd: "iptables", chain: "CNI-DN-0ce587097fe49615b54f3", owner: "4da21cf6-e3fa-4803-90d7-d1fa525214be",
		jumps: [][]string{{"-p", "tcp", "-m", "comment", "--comment", `dnat name: "br-portmap" id: "4da21cf6-e3fa-4803-90d7-d1fa525214be"`, "-m", "multiport", "--dports", "8080", "-j", "CNI-DN-0ce587097fe49615b54f3"}},
		ports: []netinfo.PortMapping{{HostPort: 8080, Protocol: "tcp", HostIP: "127.0.0.1"}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseForwards:\n got %+v\nwant %+v", got, want)
	}
}

func TestSplitRule(t *testing.T) {
	got := splitRule(`-A X -m comment --comment "a \"b\" c\\d" -j  Y`)
	want := []string{"-A", "X", "-m", "comment", "--comment", `a "b" c\d`, "-j", "Y"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Two forwards take the same port when protocol and port are the same and
// one of them is on every address, or both on the same one.
func TestOverlap(t *testing.T) {
	pm := func(proto string, port int, ip string) netinfo.PortMapping {
		return netinfo.PortMapping{Protocol: proto, HostPort: port, HostIP: ip}
	}
	for _, c := range []struct {
		a, b netinfo.PortMapping
		want bool
	}{
		{pm("tcp", 80, ""), pm("tcp", 80, ""), true},
		{pm("tcp", 80, ""), pm("tcp", 80, "127.0.0.1"), true},
		{pm("tcp", 80, "10.0.0.1"), pm("tcp", 80, "127.0.0.1"), false},
		{pm("tcp", 80, "::1"), pm("tcp", 80, "0:0::1"), true},
		{pm("tcp", 80, ""), pm("udp", 80, ""), false},
		{pm("tcp", 80, ""), pm("tcp", 81, ""), false},
	} {
		if got := overlap(c.a, c.b); got != c.want {
			t.Errorf("overlap(%+v, %+v) = %v", c.a, c.b, got)
		}
	}
}

func TestPortTakenError(t *testing.T) {
	e := &PortTakenError{Port: netinfo.PortMapping{Protocol: "tcp", HostPort: 8080, HostIP: "127.0.0.1"}, Owner: "edd46223-4c18-46d9-ae49-e3c802121f9b"}
	if got, want := e.Error(), "host port tcp/127.0.0.1:8080 is forwarded to running pod edd46223-4c18-46d9-ae49-e3c802121f9b"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
