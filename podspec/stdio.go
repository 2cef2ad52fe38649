package podspec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/podplan"
)

// rkt's per-app stdio annotations (stage0 sets them from `rkt app add
// --stdin/--stdout/--stderr`; stage1/common/types/pod.go) and its
// experimental CRI log annotations (stage1/init/common/units.go,
// stage1/init/init.go).
const (
	AnnStdin           = "coreos.com/rkt/stage2/stdin"
	AnnStdout          = "coreos.com/rkt/stage2/stdout"
	AnnStderr          = "coreos.com/rkt/stage2/stderr"
	AnnLogMode         = "coreos.com/rkt/experiment/logmode"
	AnnKubernetesDir   = "coreos.com/rkt/experiment/kubernetes-log-dir"
	AnnKubernetesPath  = "coreos.com/rkt/experiment/kubernetes-log-path"
	LogModeK8sPlain    = "k8s-plain"
	maxCRIPathLen      = 255
	maxKubernetesDirLn = 4096
)

// pod1's own CRI log option and the stdio modes (podplan).
const (
	AnnCRILogFormat  = podplan.AnnCRILogFormat
	CRIFormatRkt     = podplan.CRIFormatRkt
	CRIFormatKubelet = podplan.CRIFormatKubelet
	StdioNull        = podplan.StdioNull
	StdioLog         = podplan.StdioLog
	StdioInteractive = podplan.StdioInteractive
	StdioStream      = podplan.StdioStream
	StdioTTY         = podplan.StdioTTY
)

// stdio resolves an app's stdio from its annotations.
func stdio(ra types.Annotations, interactive, k8s bool) (Stdio, error) {
	if interactive {
		// rkt's stage1 gives the one app of an interactive pod the
		// caller's terminal for all three streams, whatever else it
		// says (units.go: SetupAppIO).
		return Stdio{Stdin: StdioInteractive, Stdout: StdioInteractive, Stderr: StdioInteractive}, nil
	}
	s := Stdio{Stdin: StdioNull, Stdout: StdioLog, Stderr: StdioLog}
	for _, st := range []struct {
		ann   string
		dst   *string
		modes []string
	}{
		{AnnStdin, &s.Stdin, []string{"null", "interactive", "tty", "stream"}},
		{AnnStdout, &s.Stdout, []string{"log", "null", "interactive", "tty", "stream"}},
		{AnnStderr, &s.Stderr, []string{"log", "null", "interactive", "tty", "stream"}},
	} {
		v, ok := ra.Get(st.ann)
		if !ok {
			continue
		}
		known := false
		for _, m := range st.modes {
			known = known || v == m
		}
		if !known {
			return s, fmt.Errorf("annotation %s: %q is not one of %s", st.ann, v, strings.Join(st.modes, ", "))
		}
		*st.dst = v
	}
	// One app has one attach protocol: rkt's stage1 serves either a
	// terminal or streams, and silently drops the terminal when both are
	// asked for.
	modes := []string{s.Stdin, s.Stdout, s.Stderr}
	if slices.Contains(modes, StdioTTY) && slices.Contains(modes, StdioStream) {
		return s, fmt.Errorf("annotations %s, %s, %s: tty and stream modes cannot be mixed in one app", AnnStdin, AnnStdout, AnnStderr)
	}
	if k8s {
		if p, ok := ra.Get(AnnKubernetesPath); ok {
			if err := checkCRIPath(p); err != nil {
				return s, fmt.Errorf("annotation %s: %w", AnnKubernetesPath, err)
			}
			s.CRIPath = p
		}
	}
	return s, nil
}

// checkCRIPath accepts a plain file name: the file is created in the CRI
// log directory and nowhere else (rkt refuses a path leaving it too).
func checkCRIPath(p string) error {
	switch {
	case p == "" || p == "." || p == "..":
		return fmt.Errorf("%q is not a file name", p)
	case len(p) > maxCRIPathLen:
		return fmt.Errorf("longer than %d bytes", maxCRIPathLen)
	case strings.ContainsAny(p, "/\x00"):
		return fmt.Errorf("%q must be a file name in the log directory, without a slash", p)
	}
	return nil
}

// consoleRaw reads pod1/console-format: whether the apps' lines reach
// the console raw.
func consoleRaw(pod types.Annotations) (bool, error) {
	v, ok := pod.Get(podplan.AnnConsoleFormat)
	switch {
	case !ok || v == podplan.ConsoleFormatRkt:
		return false, nil
	case v == podplan.ConsoleFormatRaw:
		return true, nil
	}
	return false, fmt.Errorf("annotation %s: %q is not one of %s, %s", podplan.AnnConsoleFormat, v, podplan.ConsoleFormatRkt, podplan.ConsoleFormatRaw)
}

// criLogs returns the pod's CRI log directory ("" when the pod does not
// use rkt's k8s-plain log mode) and the files' format, validated.
func criLogs(pod types.Annotations) (dir, format string, err error) {
	mode, ok := pod.Get(AnnLogMode)
	format, fok := pod.Get(AnnCRILogFormat)
	if !ok {
		if fok {
			return "", "", fmt.Errorf("annotation %s: only with %s=%s", AnnCRILogFormat, AnnLogMode, LogModeK8sPlain)
		}
		return "", "", nil
	}
	if mode != LogModeK8sPlain {
		return "", "", fmt.Errorf("annotation %s: %q is not supported (want %s)", AnnLogMode, mode, LogModeK8sPlain)
	}
	switch {
	case !fok:
		format = CRIFormatRkt
	case format != CRIFormatRkt && format != CRIFormatKubelet:
		return "", "", fmt.Errorf("annotation %s: %q is not one of %s, %s", AnnCRILogFormat, format, CRIFormatRkt, CRIFormatKubelet)
	}
	dir, ok = pod.Get(AnnKubernetesDir)
	if !ok || dir == "" {
		return "", "", fmt.Errorf("annotation %s: required with %s=%s", AnnKubernetesDir, AnnLogMode, LogModeK8sPlain)
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || len(dir) > maxKubernetesDirLn || strings.IndexByte(dir, 0) >= 0 {
		return "", "", fmt.Errorf("annotation %s: %q is not a clean absolute path", AnnKubernetesDir, dir)
	}
	return dir, format, nil
}
