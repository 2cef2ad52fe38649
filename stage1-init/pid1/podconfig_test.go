package pid1

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/stage1-init/handover"
)

// configPipe returns the read end PID 1 reads its configuration from and
// the write end run writes it to.
func configPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

const testConfig = `{"uuid":"6b4a1f5e-0d3c-4c1e-9d55-2f0f2a1d8e11","hostname":"rkt-test"}`

// PID 1 has its configuration as soon as it is written, while run still
// places it in its cgroups (the host's last step): its own set-up overlaps
// that. Only hostDone waits, until handover.HostReady and the pipe's end.
func TestPodConfigBeforeTheHostIsReady(t *testing.T) {
	r, w := configPipe(t)
	if _, err := w.WriteString(testConfig); err != nil {
		t.Fatal(err)
	}
	type result struct {
		hostDone func() error
		err      error
	}
	got := make(chan result, 1)
	go func() {
		pod, hostDone, err := readPodConfig(r)
		if err == nil && pod.Hostname != "rkt-test" {
			t.Errorf("hostname %q", pod.Hostname)
		}
		got <- result{hostDone, err}
	}()
	var res result
	select {
	case res = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the configuration was not read before the host was ready")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	done := make(chan error, 1)
	go func() { done <- res.hostDone() }()
	select {
	case err := <-done:
		t.Fatalf("hostDone returned (%v) before run said the host is ready", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := w.WriteString(handover.HostReady); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("hostDone returned (%v) before the pipe's end", err)
	case <-time.After(100 * time.Millisecond):
	}
	w.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hostDone did not return at the pipe's end")
	}
}

// A run that failed or died after the configuration never wrote
// handover.HostReady: PID 1 must then start nothing.
func TestPodConfigWithoutHostReady(t *testing.T) {
	for name, rest := range map[string]string{
		"nothing":      "",
		"part of it":   handover.HostReady[:4],
		"more than it": handover.HostReady + "x",
		"something":    "{}\n",
	} {
		t.Run(name, func(t *testing.T) {
			r, w := configPipe(t)
			if _, err := w.WriteString(testConfig + rest); err != nil {
				t.Fatal(err)
			}
			w.Close()
			_, hostDone, err := readPodConfig(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := hostDone(); err == nil || !strings.Contains(err.Error(), "did not finish preparing the host") {
				t.Fatalf("hostDone: %v", err)
			}
		})
	}
}

// A configuration cut short is refused before anything else is read.
func TestPodConfigCutShort(t *testing.T) {
	r, w := configPipe(t)
	if _, err := w.WriteString(testConfig[:20]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, _, err := readPodConfig(r); err == nil || !strings.Contains(err.Error(), "decode pod configuration") {
		t.Fatalf("readPodConfig: %v", err)
	}
}
