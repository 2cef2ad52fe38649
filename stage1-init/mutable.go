package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/status"
)

// App operations of a mutable pod (rkt app add/start/stop/rm), carried out
// by PID 1 in its event loop, so they are serialised with every exit and
// signal. Each transition is recorded in the app's JSON record before it is
// answered: added, running, exited, removing, then nothing.

func (s *supervisor) handleCall(c *control.Call) {
	if !s.pod.Mutable {
		c.Reply(control.Response{Code: control.CodeFailed, Error: "the pod is not mutable"})
		return
	}
	if s.stopping {
		c.Reply(control.Response{Code: control.CodeFailed, Error: "the pod is stopping"})
		return
	}
	// The app an add is about is in the manifest and not yet known: the
	// add itself takes care of it.
	skip := ""
	if c.Req.Op == control.OpAdd {
		skip = c.Req.App
	}
	s.reconcile(skip)
	var err error
	switch c.Req.Op {
	case control.OpAdd:
		err = s.addApp(c.Req.App, c.Req.AppSpec)
	case control.OpStart:
		err = s.startApp(c.Req.App)
	case control.OpStop:
		// Answered when the app is finished.
		s.stopApp(c)
		return
	case control.OpRm:
		s.rmApp(c)
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

func (s *supervisor) find(name string) *app {
	for _, a := range s.apps {
		if a.name == name {
			return a
		}
	}
	return nil
}

func (s *supervisor) addApp(name string, raw json.RawMessage) error {
	if s.find(name) != nil {
		return fmt.Errorf("an app named %q is already in the pod", name)
	}
	var cfg podspec.App
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("decode app: %w", err)
	}
	if cfg.Spec.App != name {
		return fmt.Errorf("app spec names %q", cfg.Spec.App)
	}
	if err := capsWithinBounds(&cfg.Spec); err != nil {
		return err
	}
	b, err := json.Marshal(&cfg.Spec)
	if err != nil {
		return err
	}
	// Saved first: enter builds its process from it.
	if err := safefile.WriteIn(layout.AppSpecDir, name+".json", b, 0o644, safefile.Volatile); err != nil {
		return fmt.Errorf("save spec: %w", err)
	}
	a := &app{cfg: &cfg, name: name, state: stateNew, backoff: cfg.Supervision.Backoff}
	// A name used before starts clean: no status of the old app.
	_ = s.dir.Remove(name)
	a.rec.State = status.StateAdded
	s.writeRecord(a)
	s.apps = append(s.apps, a)
	s.debugf("app %q: added", name)
	return nil
}

func (s *supervisor) startApp(name string) error {
	a := s.find(name)
	switch {
	case a == nil:
		return fmt.Errorf("no app named %q in the pod", name)
	case a.state == stateRunning || a.state == stateRestarting:
		return fmt.Errorf("app %q is already running", name)
	}
	// stage0 removed the old status before asking; a start is a new
	// life: counters and limits start over.
	_ = s.dir.Remove(name)
	a.starts, a.backoff, a.rec, a.noRestart = nil, a.cfg.Supervision.Backoff, status.Record{}, false
	if err := s.start(a); err != nil {
		a.state = stateDone
		a.rec.State, a.rec.LastFailure = status.StateExited, status.ReasonSetup
		s.writeRecord(a)
		return err
	}
	return nil
}

func (s *supervisor) stopApp(c *control.Call) {
	a := s.find(c.Req.App)
	if a == nil || a.state == stateNew || a.state == stateDone {
		// Done, as systemctl stop of an inactive unit is: rkt's stage0
		// fails `rkt app stop` and `rkt app rm` on any other exit code
		// (its "exit 5 means not running" check never matches).
		c.Reply(control.Response{Code: control.CodeOK, Error: fmt.Sprintf("app %q is not running", c.Req.App)})
		return
	}
	a.waiters = append(a.waiters, c)
	s.stopOne(a, c.Req.Force)
}

// stopOne stops one app as a pod stop would.
func (s *supervisor) stopOne(a *app, force bool) {
	switch {
	case a.state == stateRestarting:
		s.finish(a, *a.rec.ExitCode)
	case force:
		s.killApp(a)
	case a.killAt.IsZero():
		a.killAt = timeNow().Add(a.cfg.Supervision.Grace)
		a.noRestart = true
		s.signalApp(a, unix.SIGTERM)
	}
}

// rmApp removes an app: stopped first if it runs (at once: rkt's stage0
// has already asked for a graceful stop), then every trace PID 1 keeps.
// stage0 removes its own files and the app's rootfs afterwards.
func (s *supervisor) rmApp(c *control.Call) {
	a := s.find(c.Req.App)
	if a == nil {
		// Nothing to do: a retried rm after an interrupted one.
		s.forget(c.Req.App)
		reply(c, nil)
		return
	}
	a.removing = true
	a.rec.State = status.StateRemoving
	s.writeRecord(a)
	if a.state == stateRunning || a.state == stateRestarting {
		a.waiters = append(a.waiters, c)
		a.noRestart = true
		s.stopOne(a, true)
		return
	}
	s.remove(a)
	reply(c, nil)
}

// remove drops an app that is not running from the pod.
func (s *supervisor) remove(a *app) {
	if a.cg != nil {
		_ = a.cg.Remove()
	}
	for i, x := range s.apps {
		if x == a {
			s.apps = append(s.apps[:i], s.apps[i+1:]...)
			break
		}
	}
	s.forget(a.name)
	s.debugf("app %q: removed", a.name)
}

// forget deletes what PID 1 keeps of an app name.
func (s *supervisor) forget(name string) {
	s.dir.Unreserve(name)
	for _, f := range []string{name + status.RecordSuffix} {
		if err := unix.Unlinkat(s.dir.Fd(), f, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			s.logf("app %q: remove %s: %v", name, f, err)
		}
	}
	if err := os.Remove(layout.AppSpec(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.logf("app %q: remove spec: %v", name, err)
	}
}

// answer tells whoever waited for the app to finish (app/stop, app/rm).
func (s *supervisor) answer(a *app) {
	ws := a.waiters
	a.waiters = nil
	if a.removing {
		s.remove(a)
	}
	for _, c := range ws {
		reply(c, nil)
	}
}

// reconcile finishes what an interrupted operation left half done, before
// every app operation: an app stage0 added to the pod manifest (its
// -created marker written) whose app/add never reached PID 1 is added now;
// an app PID 1 knows that stage0 has already dropped from the manifest is
// removed. skip is the app the current operation is about.
func (s *supervisor) reconcile(skip string) {
	podDir, err := os.Getwd()
	if err != nil {
		return
	}
	names, err := podspec.AppNames(podDir)
	if err != nil {
		s.logf("reconcile: %v", err)
		return
	}
	inManifest := map[string]bool{}
	for _, n := range names {
		inManifest[n] = true
		if n == skip || s.find(n) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(layout.StatusDir, n+"-created")); err != nil {
			continue // stage0 is still adding it
		}
		if err := s.adopt(podDir, n); err != nil {
			s.logf("reconcile: app %q: %v", n, err)
		}
	}
	for _, a := range append([]*app(nil), s.apps...) {
		if a.name == skip || inManifest[a.name] || a.state == stateRunning || a.state == stateRestarting {
			continue
		}
		s.logf("reconcile: app %q left the pod manifest: removing it", a.name)
		s.remove(a)
	}
}

// adopt adds an app whose app/add was interrupted, resolving it as the
// entry point would have.
func (s *supervisor) adopt(podDir, name string) error {
	b, err := safefile.ReadRegularIn(".", layout.OptionsFile, podspec.MaxManifestSize)
	if err != nil {
		return err
	}
	var opts podspec.Options
	if err := json.Unmarshal(b, &opts); err != nil {
		return err
	}
	cfg, shared, err := podspec.LoadApp(podDir, &opts, name)
	if err != nil {
		return err
	}
	for _, v := range shared {
		if err := v.Create(podDir); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	s.logf("reconcile: app %q was added by stage0 but never reached the pod: adding it", name)
	return s.addApp(name, raw)
}
