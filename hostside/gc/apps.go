package gc

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/pod1/pod1/hostside/appops"
	"github.com/pod1/pod1/hostside/pods"
	"github.com/pod1/pod1/layout"
)

// recoverApps visits the running pods and, under each one's pod.lck (not
// waiting: a pod whose app operation is under way is left for the next
// run), finishes or undoes the app operations a killed caller left half
// done: app-level garbage collected while the pod runs.
func (c *collector) recoverApps() error {
	uuids, err := pods.UUIDs(c.o.Dir, pods.IncludeRun)
	if err != nil {
		return err
	}
	for _, uuid := range uuids {
		// Only pods with a journal have anything to recover; looking
		// costs one directory read.
		if ents, _ := os.ReadDir(filepath.Join(c.podsDir(layout.PodsRun), uuid, layout.AppOpsDir)); len(ents) == 0 {
			continue
		}
		p, err := pods.Read(c.o.Dir, uuid)
		if err != nil || p.State != pods.Running {
			continue
		}
		op, err := appops.TryOpen(p.Dir, uuid)
		if errors.Is(err, appops.ErrBusy) {
			continue
		}
		if err != nil {
			c.fail(uuid, err)
			continue
		}
		// Left in the journal for the next run; reported meanwhile.
		if err := op.Unfinished(); err != nil {
			c.fail(uuid, err)
		}
		op.Close()
	}
	return nil
}
