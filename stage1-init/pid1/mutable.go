package pid1

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podplan"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/supervisor"
)

// App operations of a mutable pod (rkt app add/start/stop/rm), carried out
// by PID 1 in its event loop, so they are serialised with every exit and
// signal. Each transition is recorded in the app's JSON record before it is
// answered: added, running, exited, removing, then nothing.

func (p *pid1) handleCall(c *control.Call) {
	if !p.pod.Mutable {
		c.Reply(control.Response{Code: control.CodeFailed, Error: "the pod is not mutable"})
		return
	}
	if p.sup.Stopping() {
		c.Reply(control.Response{Code: control.CodeFailed, Error: "the pod is stopping"})
		return
	}
	// The app an add is about is in the manifest and not yet known: the
	// add itself takes care of it.
	skip := ""
	if c.Req.Op == control.OpAdd {
		skip = c.Req.App
	}
	p.reconcile(skip)
	var err error
	switch c.Req.Op {
	case control.OpAdd:
		err = p.addApp(c.Req.App, c.Req.AppSpec)
	case control.OpStart:
		err = p.sup.StartApp(c.Req.App)
		// Answered once the app's process is known (a user namespace's
		// set-up reports it), without the loop waiting for it.
		if err == nil && p.sup.WhenStarted(c.Req.App, func() { reply(c, nil) }) {
			return
		}
	case control.OpStop:
		// Answered when the app is finished.
		p.sup.StopApp(c.Req.App, c.Req.Force, func(err error) {
			if errors.Is(err, supervisor.ErrNotRunning) {
				// Done, as systemctl stop of an inactive unit
				// is: rkt's stage0 fails `rkt app stop` and `rkt
				// app rm` on any other exit code (its "exit 5
				// means not running" check never matches).
				c.Reply(control.Response{Code: control.CodeOK, Error: fmt.Sprintf("app %q is not running", c.Req.App)})
				return
			}
			reply(c, err)
		})
		return
	case control.OpRm:
		// stage0 removes its own files and the app's rootfs
		// afterwards.
		if !p.sup.RmApp(c.Req.App, func(err error) { reply(c, err) }) {
			// Nothing to do: a retried rm after an interrupted one.
			p.os.forget(c.Req.App)
			reply(c, nil)
		}
		return
	default:
		err = fmt.Errorf("unknown operation %q", c.Req.Op)
	}
	reply(c, err)
}

func reply(c *control.Call, err error) {
	if err != nil {
		c.Reply(control.Response{Code: control.CodeFailed, Error: err.Error()})
		return
	}
	c.Reply(control.Response{Code: control.CodeOK})
}

func (p *pid1) addApp(name string, raw json.RawMessage) error {
	var cfg podplan.App
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("decode app: %w", err)
	}
	if cfg.Spec.Name != name {
		return fmt.Errorf("app spec names %q", cfg.Spec.Name)
	}
	if err := capsWithinBounds(&cfg.Spec); err != nil {
		return err
	}
	b, err := json.Marshal(&cfg.Spec)
	if err != nil {
		return err
	}
	return p.sup.AddApp(&cfg, func() error {
		// Saved first: enter builds its process from it.
		if err := safefile.WriteIn(written(layout.AppSpecDir), name+".json", b, 0o644, safefile.Volatile); err != nil {
			return fmt.Errorf("save spec: %w", err)
		}
		return nil
	})
}

// reconcile undoes what an interrupted operation left half done, before
// every app operation: an app PID 1 knows that stage0 has already dropped
// from the manifest is removed. skip is the app the current operation is
// about. (An app stage0 added whose app/add never reached PID 1 is
// resolved and added by the next operation's entry point, on the host
// side: adoptHalfAdded. PID 1 reads no image manifest.)
func (p *pid1) reconcile(skip string) {
	names, err := manifestAppNames()
	if err != nil {
		p.os.logf("reconcile: %v", err)
		return
	}
	inManifest := map[string]bool{}
	for _, n := range names {
		inManifest[n] = true
	}
	for _, a := range p.sup.Apps() {
		if a.Name == skip || inManifest[a.Name] || a.Active() {
			continue
		}
		p.os.logf("reconcile: app %q left the pod manifest: removing it", a.Name)
		p.sup.RmApp(a.Name, nil)
	}
}

// manifestAppNames lists the names of the apps in the pod manifest (the
// cwd's). Only the names are read: each is compared with the apps PID 1
// knows, which the host side validated when they were added.
func manifestAppNames() ([]string, error) {
	b, err := safefile.ReadRegularIn(".", layout.PodManifest, layout.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("pod manifest: %w", err)
	}
	var pm struct {
		Apps []struct {
			Name string `json:"name"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(b, &pm); err != nil {
		return nil, fmt.Errorf("pod manifest: %w", err)
	}
	names := make([]string, 0, len(pm.Apps))
	for _, a := range pm.Apps {
		names = append(names, a.Name)
	}
	return names, nil
}
