package cgroups

import "testing"

// The pod's cgroup is named as rkt's stage1 names it (systemd-machined's
// scope for the machine rkt-<uuid>), which rkt's API service test matches
// byte for byte: the machine name's '-'s escaped as \x2d.
func TestPodNameIsRktsScope(t *testing.T) {
	const uuid = "bfb67ff1-c745-4aec-b1e1-7ce85a1fd42b"
	const want = `machine-rkt\x2dbfb67ff1\x2dc745\x2d4aec\x2db1e1\x2d7ce85a1fd42b.scope`
	if got := PodName(uuid); got != want {
		t.Fatalf("PodName = %q, want %q", got, want)
	}
	for _, name := range []string{want, "pod1-" + uuid} {
		if got := PodUUID(name); got != uuid {
			t.Errorf("PodUUID(%q) = %q, want %q", name, got, uuid)
		}
	}
	for _, name := range []string{
		"machine-rkt-bfb67ff1-c745-4aec-b1e1-7ce85a1fd42b.scope", // unescaped
		`machine-rkt\x2dbfb67ff1\x2dc745\x2d4aec\x2db1e1\x2d7ce85a1fd42b`,
		`machine-rkt\x2dBFB67FF1\x2dc745\x2d4aec\x2db1e1\x2d7ce85a1fd42b.scope`,
		`machine-rkt\x2dbfb67ff1-c745\x2d4aec\x2db1e1\x2d7ce85a1fd42b.scope`,
		`machine-rkt\x2dbfb67ff1\x2dc745\x2d4aec\x2db1e1\x2d7ce85a1fd42b.scope/apps`,
		"pod1-bfb67ff1-c745-4aec-b1e1-7ce85a1fd42",
		"pod1-" + uuid + ".scope",
		"apps", "stage1", "",
	} {
		if got := PodUUID(name); got != "" {
			t.Errorf("PodUUID(%q) = %q, want none", name, got)
		}
	}
}

func TestUnitEscape(t *testing.T) {
	for in, want := range map[string]string{
		"rkt-1":     `rkt\x2d1`,
		"a/b":       "a-b",
		".x.y":      `\x2ex.y`,
		"a b\\c:_9": `a\x20b\x5cc:_9`,
	} {
		if got := unitEscape(in); got != want {
			t.Errorf("unitEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
