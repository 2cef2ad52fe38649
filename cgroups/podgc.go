package cgroups

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// RemovePod removes the cgroups a pod's stage1 saved in its pod directory
// dir (layout.CgroupsFile): the run entry point leaves them, emptied, for
// gc, as rkt's stage1 does. Whatever is still in them (a killed run's
// leftovers) is killed first, and it returns only once they are empty. A pod that never got as far as making them has
// nothing to remove. The file is the pod's, so every directory it names
// must be this pod's cgroup (uuid) in a real hierarchy: nothing else is
// touched. It is the stage1 gc entry point's work, which `pod1 gc` also
// does in its own process for pods of the stage1 it was built with.
func RemovePod(dir, uuid string) error {
	b, err := safefile.ReadRegularIn(dir, layout.CgroupsFile, 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", layout.CgroupsFile, err)
	}
	var g Group
	if err := json.Unmarshal(b, &g); err != nil {
		return fmt.Errorf("decode %s: %w", layout.CgroupsFile, err)
	}
	if err := CheckPod(&g, uuid); err != nil {
		return fmt.Errorf("%s: refused: %w", layout.CgroupsFile, err)
	}
	return g.RemoveTree()
}
