package podspec

import (
	"fmt"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/podplan"
)

// machinedMode reads pod1/machined: which pods are registered with
// systemd-machined (podplan.MachinedUnit when it is not given).
func machinedMode(pod types.Annotations) (string, error) {
	v, ok := pod.Get(podplan.AnnMachined)
	if !ok {
		return podplan.MachinedUnit, nil
	}
	switch v {
	case podplan.MachinedUnit, podplan.MachinedScope, podplan.MachinedNo:
		return v, nil
	}
	return "", fmt.Errorf("annotation %s: %q is not one of %s, %s, %s", podplan.AnnMachined, v,
		podplan.MachinedUnit, podplan.MachinedScope, podplan.MachinedNo)
}

// podJournalMode reads pod1/pod-journal (podplan.PodJournalAuto when it
// is not given).
func podJournalMode(pod types.Annotations) (string, error) {
	v, ok := pod.Get(podplan.AnnPodJournal)
	if !ok {
		return podplan.PodJournalAuto, nil
	}
	switch v {
	case podplan.PodJournalAuto, podplan.PodJournalYes, podplan.PodJournalNo:
		return v, nil
	}
	return "", fmt.Errorf("annotation %s: %q is not one of %s, %s, %s", podplan.AnnPodJournal, v,
		podplan.PodJournalAuto, podplan.PodJournalYes, podplan.PodJournalNo)
}

// pod1's option for the pod's own journal (podplan).
const (
	AnnPodJournal  = podplan.AnnPodJournal
	PodJournalAuto = podplan.PodJournalAuto
	PodJournalYes  = podplan.PodJournalYes
	PodJournalNo   = podplan.PodJournalNo
)
