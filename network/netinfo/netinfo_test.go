package netinfo

import (
	"net"
	"testing"
)

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"default": true, "default-restricted": true, "a.b_c-1": true, "0": true,
		"": false, "-x": false, ".x": false, "a/b": false, "../x": false, "a b": false, "é": false,
	} {
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
}

// Entries read from a pod directory may be planted: anything but what
// the stage1 writes is refused.
func TestParseRefusesPlanted(t *testing.T) {
	good := `[{"netName":"default","netConf":"net/default.conf","ifName":"eth0","ip":"172.16.28.2","args":"","mask":"255.255.255.0"}]`
	if nis, err := Parse([]byte(good)); err != nil || len(nis) != 1 || nis[0].IP.String() != "172.16.28.2" {
		t.Fatalf("Parse(good) = %v, %v", nis, err)
	}
	for _, bad := range []string{
		`[{"netName":"../x","netConf":"net/../x.conf","ifName":"eth0"}]`,
		`[{"netName":"default","netConf":"/etc/shadow","ifName":"eth0"}]`,
		`[{"netName":"default","netConf":"net/default.conf","ifName":"lo"}]`,
		`[{"netName":"default","netConf":"net/default.conf","ifName":"eth0x"}]`,
		`[{"netName":"default","netConf":"net/default.conf","ifName":"eth0","portMappings":[{"hostPort":0,"containerPort":80,"protocol":"tcp"}]}]`,
		`[{"netName":"default","netConf":"net/default.conf","ifName":"eth0","portMappings":[{"hostPort":80,"containerPort":80,"protocol":"sctp"}]}]`,
		`[{"netName":"a","netConf":"net/a.conf","ifName":"eth0"},{"netName":"a","netConf":"net/a.conf","ifName":"eth1"}]`,
		`{"netName":"default"}`,
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) accepted", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	nis, _ := Parse([]byte(`[{"netName":"default","netConf":"net/default.conf","ifName":"eth0","ip":"172.16.28.2"},{"netName":"b","netConf":"net/b.conf","ifName":"eth1","ip":""}]`))
	if got := Format(nis); got != "default:ip4=172.16.28.2, b:ip4=" {
		t.Errorf("Format = %q", got)
	}
}

// The metadata service is reached at the forwarding network's gateway.
func TestMetadataHost(t *testing.T) {
	nis := []NetInfo{{NetName: "a", HostIP: net.IPv4(10, 0, 0, 1)}, {NetName: "b", HostIP: net.IPv4(10, 0, 1, 1), Forward: true}}
	if got := MetadataHost(nis); !got.Equal(net.IPv4(10, 0, 1, 1)) {
		t.Errorf("got %v, want the forwarding network's 10.0.1.1", got)
	}
	if got := MetadataHost(nis[:1]); got != nil {
		t.Errorf("no forwarding network: got %v", got)
	}
	if got := NetnsPath("6f0e8a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b"); got != "/var/run/netns/cni-6f0e8a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Errorf("NetnsPath: %q", got)
	}
}
