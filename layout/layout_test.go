package layout

import (
	"slices"
	"testing"
)

// The data directory's paths are rkt's: pods/<state>/<uuid>, the six
// states in the order a pod passes through them.
func TestDataDirLayout(t *testing.T) {
	want := []string{"embryo", "prepare", "prepared", "run", "exited-garbage", "garbage"}
	if got := PodStates(); !slices.Equal(got, want) {
		t.Fatalf("states %q, want %q", got, want)
	}
	if got := PodIn(PodsRun, "u"); got != "pods/run/u" {
		t.Fatalf("PodIn: %q", got)
	}
	if got := StateDir(PodsGarbage); got != "pods/garbage" {
		t.Fatalf("StateDir: %q", got)
	}
}

// An app's files are where rkt's stage0 puts them.
func TestAppPaths(t *testing.T) {
	for got, want := range map[string]string{
		AppRootfs("a"):          "stage1/rootfs/opt/stage2/a/rootfs",
		AppManifest("a"):        "stage1/rootfs/opt/stage2/a/manifest",
		AppInfoManifest("a"):    "appsinfo/a/manifest",
		AppInfoTreeStoreID("a"): "appsinfo/a/treeStoreID",
		AppSpec("a"):            "stage1/rootfs/rkt/pod1/apps/a.json",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
