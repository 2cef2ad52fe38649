package appexec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// T-PROC-3 (CVE-2019-16884): a write meant for the kernel is refused when
// the file is not on procfs, as when an image or a volume puts a tmpfs at
// /proc.
func TestWriteProcFileRefusesOtherFilesystems(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "oom_score_adj")
	if err := os.WriteFile(fake, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeProcFile(fake, "-1000"); err == nil || !strings.Contains(err.Error(), "is not on procfs") {
		t.Fatalf("fake procfs file: %v", err)
	}
	if b, _ := os.ReadFile(fake); string(b) != "0\n" {
		t.Fatalf("the fake file was written: %q", b)
	}
	cur, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeProcFile("/proc/self/oom_score_adj", strings.TrimSpace(string(cur))); err != nil {
		t.Fatalf("the real file: %v", err)
	}
	// The private procfs instance reaches the same file.
	if err := writeProcSelf("oom_score_adj", strings.TrimSpace(string(cur))); err != nil {
		t.Fatalf("private procfs: %v", err)
	}
}

func TestCapabilityNames(t *testing.T) {
	for _, n := range DefaultCapabilities {
		if _, err := ParseCapability(n); err != nil {
			t.Errorf("default set: %v", err)
		}
	}
	for _, bad := range []string{"cap_chown", "CHOWN", "CAP_FLY", ""} {
		if _, err := ParseCapability(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	got := SortCapabilities([]string{"CAP_SYS_ADMIN", "CAP_CHOWN", "CAP_KILL", "CAP_CHOWN"})
	if !slices.Equal(got, []string{"CAP_CHOWN", "CAP_KILL", "CAP_SYS_ADMIN"}) {
		t.Errorf("sorted %v", got)
	}
	if len(AllCapabilities()) < 41 {
		t.Errorf("only %d capabilities known", len(AllCapabilities()))
	}
}

// Every default path is one protectPaths accepts.
func TestDefaultProtectedPathsAreValid(t *testing.T) {
	for _, p := range append(slices.Clone(DefaultMaskedPaths), DefaultReadOnlyPaths...) {
		if !strings.HasPrefix(p, "/proc/") && !strings.HasPrefix(p, "/sys/") || filepath.Clean(p) != p {
			t.Errorf("%q", p)
		}
	}
}
