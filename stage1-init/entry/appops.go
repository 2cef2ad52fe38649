package entry

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podspec"
	"github.com/pod1/pod1/safefile"
	"github.com/pod1/pod1/sockact"
)

// Roles of the app entry points (contract §7), run by stage0 as children
// with cwd = the pod directory.
const (
	roleAppAdd   = "app-add"
	roleAppStart = "app-start"
	roleAppStop  = "app-stop"
	roleAppRm    = "app-rm"
)

// opTimeout bounds how long an entry point waits for PID 1: a stop waits
// out the app's grace period, which is at most an hour.
const opTimeout = 2 * time.Hour

// appOpMain is app/add (--debug --uuid --app), app/start, app/stop and
// app/rm (--debug --app): it asks the pod's PID 1 to act and returns when
// the action is done (0; for app/stop also when the app was not running,
// which it says on stderr and changes nothing), or failed (254, one line).
func appOpMain(role string, args []string) int {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("debug", false, "log to stderr")
	uuid := fs.String("uuid", "", "pod UUID (app/add)")
	name := fs.String("app", "", "app name")
	force := fs.Bool("force", false, "app/stop: kill at once")
	if err := fs.Parse(args); err != nil {
		return fail(fmt.Errorf("flags: %w", err))
	}
	if fs.NArg() != 0 {
		return fail(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *name == "" {
		return fail(errors.New("--app: missing"))
	}
	// An add takes care of its own app; any other operation may be
	// about an app whose add was interrupted.
	if role == roleAppAdd {
		adoptHalfAdded(*name)
	} else {
		adoptHalfAdded("")
	}
	req := &control.Request{App: *name, Force: *force}
	switch role {
	case roleAppAdd:
		req.Op = control.OpAdd
		spec, err := resolveAddedApp(*uuid, *name)
		if err != nil {
			return refuseAdd(*name, err)
		}
		req.AppSpec = spec
		if err := exposeAddedSources(spec); err != nil {
			return refuseAdd(*name, fmt.Errorf("app %q: %w", *name, err))
		}
	case roleAppStart:
		req.Op = control.OpStart
	case roleAppStop:
		req.Op = control.OpStop
	case roleAppRm:
		req.Op = control.OpRm
	}
	resp, err := control.Do(req, opTimeout)
	if err != nil {
		return fail(fmt.Errorf("app %q: %s: %w", *name, req.Op, err))
	}
	if req.Op == control.OpAdd && resp.Code != control.CodeOK {
		return refuseAdd(*name, fmt.Errorf("app %q: %s: %s", *name, req.Op, resp.Error))
	}
	if resp.Error != "" {
		logx.Errorf("app %q: %s: %s", *name, req.Op, resp.Error)
	}
	return resp.Code
}

// refuseAdd fails an add and takes back stage0's part of it, so that a
// refused app leaves no trace (undoRefusedAdd). The refusal is the one
// line; an undo that fails adds its own.
func refuseAdd(name string, err error) int {
	code := fail(err)
	if uerr := undoRefusedAdd(name); uerr != nil {
		logx.Errorf("app %q: undo the refused add: %v", name, uerr)
	}
	return code
}

// resolveAddedApp validates the app stage0 just added to the pod manifest
// and resolves it with the pod's run options, on the host side, before
// PID 1 hears of it.
func resolveAddedApp(uuid, name string) (json.RawMessage, error) {
	opts, err := loadOptions()
	if err != nil {
		return nil, err
	}
	if uuid != "" && uuid != opts.UUID {
		return nil, fmt.Errorf("--uuid=%s: this pod is %s", uuid, opts.UUID)
	}
	podDir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	app, shared, err := podspec.LoadApp(podDir, opts, name)
	if err != nil {
		return nil, err
	}
	if err := sockact.RefuseAdded(app); err != nil {
		return nil, err
	}
	for _, v := range shared {
		if err := v.Create(podDir); err != nil {
			return nil, err
		}
	}
	return json.Marshal(app)
}

// loadOptions reads the pod's run options, which the run entry point saved
// before PID 1 started and which PID 1 cannot write (pinOptions): the cwd
// is the pod directory.
func loadOptions() (*podspec.Options, error) {
	b, err := safefile.ReadRegularIn(".", layout.OptionsFile, layout.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("pod options: %w", err)
	}
	var opts podspec.Options
	if err := json.Unmarshal(b, &opts); err != nil {
		return nil, fmt.Errorf("pod options: %w", err)
	}
	return &opts, nil
}

// adoptHalfAdded finishes, before an app operation, each add that stage0
// did its part of (the app is in the pod manifest, its -created marker
// written) but whose app/add never reached PID 1 (no saved spec, which
// PID 1 writes first thing when it adds an app): it is resolved here, on
// the host side, as app/add would have, and handed to PID 1. skip is the
// app an add is about (the add itself takes care of it), else "". Failures
// are logged: the operation asked for goes on.
func adoptHalfAdded(skip string) {
	podDir, err := os.Getwd()
	if err != nil {
		return
	}
	names, err := podspec.AppNames(podDir)
	if err != nil {
		return
	}
	for _, n := range names {
		if n == skip {
			continue
		}
		if _, err := os.Lstat(filepath.Join(layout.StatusDir, n+layout.CreatedSuffix)); err != nil {
			continue // stage0 is still adding it
		}
		if _, err := os.Lstat(filepath.Join(layout.AppSpecDir, n+".json")); !errors.Is(err, os.ErrNotExist) {
			continue // PID 1 has it
		}
		spec, err := resolveAddedApp("", n)
		if err == nil {
			err = exposeAddedSources(spec)
		}
		if err == nil {
			var resp *control.Response
			resp, err = control.Do(&control.Request{Op: control.OpAdd, App: n, AppSpec: spec}, opTimeout)
			if err == nil && resp.Code != control.CodeOK {
				err = errors.New(resp.Error)
			}
		}
		if err != nil {
			logx.Warnf("app %q was added by stage0 but never reached the pod; adding it failed: %v", n, err)
			continue
		}
		logx.Warnf("app %q was added by stage0 but never reached the pod: added it", n)
	}
}
