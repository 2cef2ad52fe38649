package podmounts

import "testing"

func TestCopied(t *testing.T) {
	const pod = "/d/pods/exited-garbage/u"
	s1 := Mount{Point: pod + "/stage1/rootfs", FSType: "overlay", Group: 30}
	app := Mount{Point: pod + "/stage1/rootfs/opt/stage2/web/rootfs", FSType: "overlay", Group: 31}
	fly := Mount{Point: app.Point + "/dev", FSType: "devtmpfs", Group: 11}
	all := []Mount{
		{Point: "/", FSType: "ext4", Group: 1},
		{Point: "/d", FSType: "ext4", Group: 2},
		s1, app,
		{Point: "/src/pods/exited-garbage/u/stage1/rootfs", FSType: "overlay", Group: 30},
		{Point: "/src/pods/exited-garbage/u/stage1/rootfs/opt/stage2/web/rootfs", FSType: "overlay", Group: 31},
		// A bind of the host's /dev under the pod (rkt's fly stage1):
		// in the host /dev's peer group, never unmounted here.
		{Point: "/dev", FSType: "devtmpfs", Group: 11},
		fly,
	}
	for _, c := range []struct {
		what string
		m    Mount
		want bool
	}{
		{"an app's root with a copy", app, true},
		{"the stage1's root (rkt's gc takes it, with its copy)", s1, false},
		{"a bind of the host's /dev", fly, false},
		{"the copy itself, outside the pod", all[5], false},
		{"not shared", Mount{Point: app.Point, FSType: "overlay"}, false},
		{"no copy", Mount{Point: app.Point, FSType: "overlay", Group: 99}, false},
		{"not an overlay", Mount{Point: app.Point, FSType: "tmpfs", Group: 31}, false},
		{"not where stage0 mounts", Mount{Point: pod + "/stage1/rootfs/opt/x", FSType: "overlay", Group: 31}, false},
		{"below an app's root", Mount{Point: app.Point + "/x", FSType: "overlay", Group: 31}, false},
		{"no app name", Mount{Point: pod + "/stage1/rootfs/opt/stage2//rootfs", FSType: "overlay", Group: 31}, false},
	} {
		if got := Copied(pod, c.m, all); got != c.want {
			t.Errorf("%s: Copied(%+v) = %v, want %v", c.what, c.m, got, c.want)
		}
	}
}
