package podspec

import (
	"fmt"
	"strconv"
	"time"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/podplan"
)

// Annotations of ours (app-level in the pod manifest's apps[].annotations,
// or in the image manifest as the image's default; pod-level in the pod
// manifest's annotations). Documented in docs/supervision.md.
const (
	AnnRestartPolicy      = "pod1/restart-policy"
	AnnRestartBackoff     = "pod1/restart-backoff"
	AnnRestartBackoffMax  = "pod1/restart-backoff-max"
	AnnStartLimitBurst    = "pod1/start-limit-burst"
	AnnStartLimitInterval = "pod1/start-limit-interval"
	AnnStopGracePeriod    = "pod1/stop-grace-period"
	AnnPidsMax            = "pod1/pids-max"
	AnnExitPolicy         = "pod1/exit-policy"
	AnnMainApp            = "pod1/main-app"
	AnnPodPidsMax         = "pod1/pod-pids-max"
)

// Restart policies, exit policies and the supervision defaults (podplan).
const (
	RestartNever              = podplan.RestartNever
	RestartOnFailure          = podplan.RestartOnFailure
	RestartAlways             = podplan.RestartAlways
	ExitAllApps               = podplan.ExitAllApps
	ExitAnyApp                = podplan.ExitAnyApp
	ExitMainApp               = podplan.ExitMainApp
	DefaultBackoff            = podplan.DefaultBackoff
	DefaultBackoffMax         = podplan.DefaultBackoffMax
	DefaultStartLimitBurst    = podplan.DefaultStartLimitBurst
	DefaultStartLimitInterval = podplan.DefaultStartLimitInterval
	DefaultPidsMax            = podplan.DefaultPidsMax
)

// annotations looks a name up in the app's pod-manifest annotations first,
// then in its image's.
type annotations []types.Annotations

func (as annotations) get(name string) (string, bool) {
	for _, a := range as {
		if v, ok := a.Get(name); ok {
			return v, true
		}
	}
	return "", false
}

func supervision(as annotations) (Supervision, error) {
	s := Supervision{
		Restart: RestartNever, Backoff: DefaultBackoff, BackoffMax: DefaultBackoffMax,
		Burst: DefaultStartLimitBurst, Interval: DefaultStartLimitInterval,
		// PID 1 resolves the app's pids.max against the pod's
		// (podplan.AppPidsMax) unless an annotation sets it.
		Grace: DefaultGracePeriod, PidsMax: -1,
	}
	if v, ok := as.get(AnnRestartPolicy); ok {
		switch v {
		case RestartNever, RestartOnFailure, RestartAlways:
			s.Restart = v
		default:
			return s, fmt.Errorf("annotation %s: %q is not never, on-failure or always", AnnRestartPolicy, v)
		}
	}
	durs := []struct {
		name     string
		dst      *time.Duration
		min, max time.Duration
	}{
		{AnnRestartBackoff, &s.Backoff, 0, time.Hour},
		{AnnRestartBackoffMax, &s.BackoffMax, 0, 24 * time.Hour},
		{AnnStartLimitInterval, &s.Interval, 0, 24 * time.Hour},
		{AnnStopGracePeriod, &s.Grace, 0, time.Hour},
	}
	for _, d := range durs {
		v, ok := as.get(d.name)
		if !ok {
			continue
		}
		x, err := time.ParseDuration(v)
		if err != nil || x < d.min || x > d.max {
			return s, fmt.Errorf("annotation %s: %q must be a duration between %v and %v", d.name, v, d.min, d.max)
		}
		*d.dst = x
	}
	if s.BackoffMax < s.Backoff {
		return s, fmt.Errorf("annotation %s: %v is less than %s %v", AnnRestartBackoffMax, s.BackoffMax, AnnRestartBackoff, s.Backoff)
	}
	ints := []struct {
		name     string
		dst      *int
		min, max int
	}{
		{AnnStartLimitBurst, &s.Burst, 1, 1 << 20},
		{AnnPidsMax, &s.PidsMax, 0, 1 << 22},
	}
	for _, n := range ints {
		v, ok := as.get(n.name)
		if !ok {
			continue
		}
		x, err := strconv.Atoi(v)
		if err != nil || x < n.min || x > n.max {
			return s, fmt.Errorf("annotation %s: %q must be an integer between %d and %d", n.name, v, n.min, n.max)
		}
		*n.dst = x
	}
	return s, nil
}

func exitPolicy(pod types.Annotations, apps map[string]bool) (policy, main string, err error) {
	policy = ExitAllApps
	if v, ok := pod.Get(AnnExitPolicy); ok {
		switch v {
		case ExitAllApps, ExitAnyApp, ExitMainApp:
			policy = v
		default:
			return "", "", fmt.Errorf("annotation %s: %q is not all-apps, any-app or main-app", AnnExitPolicy, v)
		}
	}
	main, hasMain := pod.Get(AnnMainApp)
	switch {
	case policy == ExitMainApp && !hasMain:
		return "", "", fmt.Errorf("annotation %s: main-app needs annotation %s naming the app", AnnExitPolicy, AnnMainApp)
	case hasMain && policy != ExitMainApp:
		return "", "", fmt.Errorf("annotation %s: only meaningful with %s main-app", AnnMainApp, AnnExitPolicy)
	case hasMain && !apps[main]:
		return "", "", fmt.Errorf("annotation %s: no app named %q", AnnMainApp, main)
	}
	return policy, main, nil
}

// podPidsMax reads the pod's limit on its tasks: -1 when the annotation is
// absent (the stage1 then takes cgroups.DefaultPodPidsMax), 0 for none.
func podPidsMax(pod types.Annotations) (int, error) {
	v, ok := pod.Get(AnnPodPidsMax)
	if !ok {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<22 {
		return 0, fmt.Errorf("annotation %s: %q must be an integer between 0 and %d", AnnPodPidsMax, v, 1<<22)
	}
	return n, nil
}
