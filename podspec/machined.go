package podspec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/podplan"
)

// machinedMode reads pod1/machined: which pods are registered with
// systemd-machined (podplan.MachinedUnit when it is not given).
func machinedMode(pod types.Annotations) (string, error) {
	return oneOf(pod, podplan.AnnMachined, podplan.MachinedUnit, podplan.MachinedUnit, podplan.MachinedScope, podplan.MachinedNo)
}

// podJournalMode reads pod1/pod-journal (podplan.PodJournalAuto when it
// is not given).
func podJournalMode(pod types.Annotations) (string, error) {
	return oneOf(pod, podplan.AnnPodJournal, podplan.PodJournalAuto, podplan.PodJournalAuto, podplan.PodJournalYes, podplan.PodJournalNo)
}

// oneOf reads the pod annotation name, which must be one of values: def
// when it is not given.
func oneOf(pod types.Annotations, name, def string, values ...string) (string, error) {
	v, ok := pod.Get(name)
	if !ok {
		return def, nil
	}
	if slices.Contains(values, v) {
		return v, nil
	}
	return "", fmt.Errorf("annotation %s: %q is not one of %s", name, v, strings.Join(values, ", "))
}

// pod1's option for the pod's own journal (podplan).
const (
	AnnPodJournal  = podplan.AnnPodJournal
	PodJournalAuto = podplan.PodJournalAuto
	PodJournalYes  = podplan.PodJournalYes
	PodJournalNo   = podplan.PodJournalNo
)
