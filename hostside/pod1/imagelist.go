package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/common"
	"github.com/appc/spec/schema/types"

	"github.com/pod1/pod1/hostside/launch"
)

// Separators in the image list, as in rkt (rkt/cli_apps.go parseApps).
const (
	argsStart = "--"  // the current app's arguments follow
	appEnd    = "---" // ends the current app's arguments
)

// errNoImage is returned for app flags or arguments given before any image.
var errNoImage = errors.New("must follow an image")

// parseApps reads the image list: each non-flag word starts a new app, app
// flags apply to the latest app, "--" switches to collecting that app's
// arguments, and "---" ends them. Several images may follow each other
// without "---" when they have no arguments, as with rkt. A global flag
// (--dir, --debug, --insecure-options) may stand anywhere outside an app's
// arguments: it goes to g.
func parseApps(g *globalFlags, args []string) ([]launch.AppOptions, error) {
	var apps []*appFlags
	inArgs := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		var cur *appFlags
		if len(apps) > 0 {
			cur = apps[len(apps)-1]
		}
		switch {
		case inArgs:
			if a == appEnd {
				inArgs = false
				continue
			}
			cur.opts.Args = append(cur.opts.Args, a)
		case a == appEnd:
			// Separator between apps; nothing to end here.
		case a == argsStart:
			if cur == nil {
				return nil, fmt.Errorf("%s: app arguments %w", argsStart, errNoImage)
			}
			inArgs = true
			// An empty, non-nil slice records "-- given", though it
			// changes nothing in the manifest.
			if cur.opts.Args == nil {
				cur.opts.Args = []string{}
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if n, err := g.parseOne(args[i:]); err != nil {
				return nil, err
			} else if n > 0 {
				i += n - 1
				continue
			}
			if cur == nil {
				return nil, fmt.Errorf("%s: app flag %w", a, errNoImage)
			}
			n, err := cur.parseFlag(args[i:])
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", cur.opts.Image, err)
			}
			i += n - 1
		default:
			apps = append(apps, newAppFlags(a))
		}
	}
	if len(apps) == 0 {
		return nil, errors.New("no image given")
	}
	out := make([]launch.AppOptions, len(apps))
	for i, a := range apps {
		out[i] = a.opts
	}
	return out, nil
}

// appFlags holds one app's options and the flag set bound to them.
type appFlags struct {
	opts launch.AppOptions
	fs   *flag.FlagSet
}

func newAppFlags(image string) *appFlags {
	a := &appFlags{opts: launch.AppOptions{Image: image}}
	fs := newFlagSet("app")
	fs.StringVar(&a.opts.Name, "name", "", "app name")
	fs.StringVar(&a.opts.Exec, "exec", "", "replace the image's exec")
	fs.StringVar(&a.opts.User, "user", "", "user to run as")
	fs.StringVar(&a.opts.Group, "group", "", "group to run as")
	fs.StringVar(&a.opts.WorkingDir, "working-dir", "", "working directory")
	fs.Var((*envFlag)(&a.opts.Env), "set-env", "K=V (repeatable)")
	fs.Var((*mountFlag)(&a.opts.Mounts), "mount", "volume=NAME,target=PATH (repeatable)")
	fs.Var((*annotationFlag)(&a.opts.Annotations), "annotation", "NAME=VALUE app annotation, e.g. pod1/restart-policy=always (repeatable)")
	a.fs = fs
	return a
}

// parseFlag parses the single app flag at args[0] (taking its value from
// args[1] when not written as --flag=value) and returns how many words it
// used. Feeding Go's flag package one flag at a time keeps its syntax and
// messages while leaving "--", "---" and image names to parseApps.
func (a *appFlags) parseFlag(args []string) (int, error) {
	name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
	n := 1
	if f := a.fs.Lookup(name); f != nil && !hasValue && !isBool(f) {
		if len(args) < 2 {
			return 0, fmt.Errorf("flag needs an argument: %s", args[0])
		}
		n = 2
	}
	if err := a.fs.Parse(args[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// envFlag collects K=V pairs, checked with appc's own rules so a bad name
// is reported at the flag rather than as a manifest error later.
type envFlag []types.EnvironmentVariable

func (e *envFlag) String() string {
	parts := make([]string, len(*e))
	for i, v := range *e {
		parts[i] = v.Name + "=" + v.Value
	}
	return strings.Join(parts, " ")
}

func (e *envFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want NAME=VALUE")
	}
	if _, err := json.Marshal(types.Environment{{Name: name, Value: value}}); err != nil {
		return err
	}
	*e = append(*e, types.EnvironmentVariable{Name: name, Value: value})
	return nil
}

// mountFlag collects --mount volume=NAME,target=PATH values (rkt syntax).
type mountFlag []schema.Mount

func (m *mountFlag) String() string {
	parts := make([]string, len(*m))
	for i, v := range *m {
		parts[i] = "volume=" + v.Volume.String() + ",target=" + v.Path
	}
	return strings.Join(parts, " ")
}

func (m *mountFlag) Set(s string) error {
	q, err := common.MakeQueryString(s)
	if err != nil {
		return err
	}
	kv, err := url.ParseQuery(q)
	if err != nil {
		return err
	}
	var mnt schema.Mount
	for k, v := range kv {
		if len(v) != 1 {
			return fmt.Errorf("%s given %d times", k, len(v))
		}
		switch k {
		case "volume":
			n, err := types.NewACName(v[0])
			if err != nil {
				return fmt.Errorf("volume: %w", err)
			}
			mnt.Volume = *n
		case "target":
			if !filepath.IsAbs(v[0]) {
				return fmt.Errorf("target %q: must be an absolute path", v[0])
			}
			mnt.Path = v[0]
		default:
			return fmt.Errorf("unknown parameter %q", k)
		}
	}
	if mnt.Volume.Empty() || mnt.Path == "" {
		return errors.New("want volume=NAME,target=PATH")
	}
	*m = append(*m, mnt)
	return nil
}

// annotationFlag collects NAME=VALUE app annotations; names are appc
// identifiers.
type annotationFlag types.Annotations

func (a *annotationFlag) String() string {
	parts := make([]string, len(*a))
	for i, x := range *a {
		parts[i] = string(x.Name) + "=" + x.Value
	}
	return strings.Join(parts, ",")
}

func (a *annotationFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q is not NAME=VALUE", s)
	}
	name, err := types.NewACIdentifier(k)
	if err != nil {
		return fmt.Errorf("annotation name %q: %w", k, err)
	}
	(*types.Annotations)(a).Set(*name, v)
	return nil
}
