package machined

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/pod1/pod1/cgroups"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podplan"
)

// Pending is a registration that waits for the pod's PID 1 to be in its
// cgroup: machined ties a registered machine to the unit of its leader's
// cgroup, read when the call arrives.
type Pending struct{ pod Pod }

// Register makes the registration; a failure is a warning, the pod runs
// unregistered.
func (r *Pending) Register() {
	if r == nil {
		return
	}
	if err := Register(r.pod); err != nil && !errors.Is(err, ErrAbsent) {
		logx.Warnf("machined: the pod is not registered: %v", err)
	}
}

// NewPod makes the pod's cgroup, named name, as cgroups.NewPod does
// (need and ancestor are its; leaf is the child PID 1 is to live in), and
// registers the pod with machined where it runs, as mode
// (podplan.AnnMachined) says:
//
//   - a pod made inside its caller's unit (systemd-run rkt run, a
//     .service) stays there, with the unit's limits, and is registered
//     with RegisterMachine once PID 1 is in its cgroup (the Pending
//     returned): the machine is the unit's, as with nspawn --keep-unit;
//     unless mode is podplan.MachinedNo;
//   - any other pod, only with podplan.MachinedScope, gets from machined,
//     with CreateMachine, the scope machine.slice/machine-rkt\x2d<uuid>.scope,
//     named as pod1 names the pod's cgroup anyway, which systemd makes,
//     delegates and moves PID 1 into; that scope becomes the pod's
//     cgroup. Not by default: systemd removes the scope, with the pod's
//     cgroups, when the pod ends, and moves the pod out of its caller's
//     cgroup, where rkt's users and tests find a pod's cgroups until gc.
//
// Only on a unified hierarchy: where systemd runs the v1 or hybrid layout
// the pod's cgroup is below the caller's in every hierarchy, which a
// scope of systemd's cannot be, and machined would tie a registration to
// the caller's own unit (a login session), which stopping the machine
// would stop. Where machined cannot be asked (Reachable) or does not
// answer, or mode does not ask for it, the pod runs as cgroups.NewPod makes it,
// unregistered, with one warning when the asking failed (none where the
// bus says machined is absent).
func NewPod(p Pod, name, leaf string, need []string, ancestor int, mode string) (*cgroups.Group, *Pending, error) {
	g, err := cgroups.NewPod(name, need, ancestor)
	if err != nil || mode == podplan.MachinedNo || !g.Unified {
		return g, nil, err
	}
	inUnit := cgroups.InCallersCgroup(g, ancestor)
	if !inUnit && mode != podplan.MachinedScope || !Reachable() {
		return g, nil, nil
	}
	if inUnit {
		return g, &Pending{pod: p}, nil
	}
	// The cgroup NewPod made is new and empty: systemd's scope takes its
	// place.
	if err := os.Remove(g.V2); err != nil {
		return g, nil, nil
	}
	if err := Create(p); err != nil {
		if !errors.Is(err, ErrAbsent) {
			logx.Warnf("machined: the pod is not registered: %v", err)
		}
		g, err := cgroups.NewPod(name, need, ancestor)
		return g, nil, err
	}
	scope, err := cgroups.UnifiedOf(p.Leader)
	if err == nil && filepath.Base(scope) != name {
		// Not the scope asked for: PID 1 stays where systemd put it
		// until the pod's own cgroup takes it.
		logx.Warnf("machined: the pod's scope is %s, not %s: the pod runs in a cgroup of its own", scope, name)
		g, err := cgroups.NewPod(name, need, ancestor)
		return g, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	ag, err := cgroups.AdoptPod(scope, need, p.Leader, leaf)
	return ag, nil, err
}
