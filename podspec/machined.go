package podspec

import (
	"fmt"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/podplan"
)

// machinedOff reads pod1/machined: whether the pod is kept out of
// systemd-machined.
func machinedOff(pod types.Annotations) (bool, error) {
	v, ok := pod.Get(podplan.AnnMachined)
	switch {
	case !ok || v == podplan.MachinedRegister:
		return false, nil
	case v == podplan.MachinedNo:
		return true, nil
	}
	return false, fmt.Errorf("annotation %s: %q is not one of %s, %s", podplan.AnnMachined, v, podplan.MachinedRegister, podplan.MachinedNo)
}
