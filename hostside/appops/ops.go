package appops

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/layout"
)

// Add renders the app into the pod, adds it to the pod manifest, writes
// its -created marker and has the pod's PID 1 take it in (rkt's
// stage0/app_add.go order). It returns the app's name.
func (p *Pod) Add(dataDir string, a launch.AppOptions) (string, error) {
	if a.Name != "" {
		if _, err := types.NewACName(a.Name); err != nil {
			return "", fmt.Errorf("--name %q: %w", a.Name, err)
		}
		if err := p.usable(a.Name); err != nil {
			return "", err
		}
		if err := p.checkFree(a.Name); err != nil {
			return "", err
		}
		// Journalled before anything is rendered: a crash from here on
		// is undone by Recover.
		if err := p.intend(a.Name, opAdd); err != nil {
			return "", err
		}
		step("add:journalled")
	}
	ra, err := launch.RenderApp(p.Dir, dataDir, a)
	name := a.Name
	if ra != nil {
		name = ra.Name.String()
	}
	if err != nil {
		if name != "" {
			_ = p.undoAdd(name)
		}
		return "", err
	}
	if a.Name == "" {
		// The name came from the image: journal now, then check.
		if err := p.intend(name, opAdd); err != nil {
			_ = launch.RemoveApp(p.Dir, name)
			return "", err
		}
		if err := p.usable(name); err != nil {
			return "", err
		}
		if err := p.checkFree(name); err != nil {
			_ = p.done(name)
			return "", err
		}
	}
	step("add:rendered")
	pm, err := p.readManifest()
	if err == nil {
		pm.Apps = append(pm.Apps, *ra)
		err = p.writeManifest(pm)
	}
	if err == nil {
		step("add:manifest")
		err = touch(p.marker(name, layout.CreatedSuffix))
	}
	if err == nil {
		step("add:created")
		err = p.call("add", "--debug=false", "--uuid="+p.UUID, "--app="+name)
	}
	if err == nil {
		step("add:added")
	}
	if err != nil {
		return "", errors.Join(fmt.Errorf("app %s: add: %w", name, err), p.undoAdd(name))
	}
	return name, p.done(name)
}

// checkFree refuses a name the pod already has.
func (p *Pod) checkFree(name string) error {
	pm, err := p.readManifest()
	if err != nil {
		return err
	}
	an, err := types.NewACName(name)
	if err != nil {
		return err
	}
	if pm.Apps.Get(*an) != nil {
		return fmt.Errorf("app %s: the pod already has an app of that name", name)
	}
	return nil
}

// Start (re)starts an app: stage0 drops its old -started marker and status
// and writes a new marker, then app/start.
func (p *Pod) Start(name string) error {
	if err := p.usable(name); err != nil {
		return err
	}
	_ = os.Remove(p.marker(name, layout.StartedSuffix))
	_ = os.Remove(p.marker(name, ""))
	if err := touch(p.marker(name, layout.StartedSuffix)); err != nil {
		return fmt.Errorf("app %s: start: %w", name, err)
	}
	if err := p.call("start", "--debug=false", "--app="+name); err != nil {
		return fmt.Errorf("app %s: start: %w", name, err)
	}
	return nil
}

// Stop stops an app gracefully; an app that is not running is left as it
// is, without an error (as rkt's stage1 does).
func (p *Pod) Stop(name string) error {
	if err := p.usable(name); err != nil {
		return err
	}
	if err := p.call("stop", "--debug=false", "--app="+name); err != nil {
		return fmt.Errorf("app %s: stop: %w", name, err)
	}
	return nil
}

// Rm removes an app: stopped if it runs, forgotten by PID 1, then every
// file of it removed and the pod manifest rewritten without it. Unlike
// rkt, the -created and -started markers go too: a removed app leaves
// nothing.
func (p *Pod) Rm(name string) error {
	if _, err := types.NewACName(name); err != nil {
		return fmt.Errorf("--app %q: %w", name, err)
	}
	if err := p.intend(name, opRm); err != nil {
		return err
	}
	step("rm:journalled")
	if err := p.finishRm(name); err != nil {
		return fmt.Errorf("app %s: rm: %w", name, err)
	}
	if err := p.done(name); err != nil {
		return err
	}
	delete(p.unfinished, name)
	return nil
}

// finishRm is every step of rm, each idempotent, so an interrupted rm is
// completed by running it again. An app that is not in the pod manifest
// is not PID 1's: an add enters it there before PID 1 hears of it, an rm
// drops it last. Only its files are left then, without asking the
// stage1, which would refuse a name it does not know.
func (p *Pod) finishRm(name string) error {
	pm, err := p.readManifest()
	if err != nil {
		return err
	}
	an, err := types.NewACName(name)
	if err != nil {
		return err
	}
	if pm.Apps.Get(*an) == nil {
		return p.removeFiles(name)
	}
	if err := p.call("stop", "--debug=false", "--app="+name); err != nil {
		return err
	}
	if err := p.call("rm", "--debug=false", "--app="+name); err != nil {
		return err
	}
	step("rm:forgotten")
	return p.removeFiles(name)
}

// removeFiles removes the app's files on the host side and its manifest
// entry (last: until then Recover can still find the app).
func (p *Pod) removeFiles(name string) error {
	if err := launch.RemoveApp(p.Dir, name); err != nil {
		return err
	}
	for _, f := range []string{p.marker(name, ""), p.marker(name, layout.CreatedSuffix), p.marker(name, layout.StartedSuffix), filepath.Join(p.Dir, layout.AppEnv(name))} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return p.dropFromManifest(name)
}

// undoAdd rolls an add back: PID 1 forgets the app if it heard of it,
// then its files go.
func (p *Pod) undoAdd(name string) error {
	if err := p.finishRm(name); err != nil {
		return fmt.Errorf("app %s: undo add: %w", name, err)
	}
	return p.done(name)
}
