package appops

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

// Journalled operations.
const (
	opAdd = "add"
	opRm  = "rm"
)

// intend records that op on app is under way: appops/<app> holds the op.
func (p *Pod) intend(app, op string) error {
	dir := filepath.Join(p.Dir, layout.AppOpsDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := safefile.WriteFile(filepath.Join(dir, app), []byte(op+"\n"), 0o640, safefile.Durable); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// done clears the journal entry of app.
func (p *Pod) done(app string) error {
	err := os.Remove(filepath.Join(p.Dir, layout.AppOpsDir, app))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// Recover finishes or undoes every operation an interrupted caller left in
// the journal: an add is undone (the app may be half rendered, half
// registered), an rm is completed. It runs under pod.lck, from Open and
// from pod1 gc.
func (p *Pod) Recover() error {
	ents, err := os.ReadDir(filepath.Join(p.Dir, layout.AppOpsDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	var errs []error
	p.unfinished = nil
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			_ = os.Remove(filepath.Join(p.Dir, layout.AppOpsDir, e.Name()))
			continue
		}
		b, err := safefile.ReadRegularIn(p.Dir, filepath.Join(layout.AppOpsDir, e.Name()), layout.MaxFileSize)
		if err != nil {
			p.unfinish(e.Name(), fmt.Errorf("app %s: journal: %w", e.Name(), err))
			errs = append(errs, p.unfinished[e.Name()])
			continue
		}
		switch op := strings.TrimSpace(string(b)); op {
		case opAdd, opRm:
			// Both end the same way: the app gone entirely. (An rm
			// that got as far as the journal was asked for; an add
			// that did not finish is rolled back.)
			err := p.finishRm(e.Name())
			if err == nil {
				err = p.done(e.Name())
			}
			if err != nil {
				p.unfinish(e.Name(), fmt.Errorf("app %s: an earlier %s did not finish: %w", e.Name(), op, err))
				errs = append(errs, p.unfinished[e.Name()])
			}
		default:
			p.unfinish(e.Name(), fmt.Errorf("app %s: journal: unknown operation %q", e.Name(), op))
			errs = append(errs, p.unfinished[e.Name()])
		}
	}
	return errors.Join(errs...)
}

func (p *Pod) unfinish(app string, err error) {
	if p.unfinished == nil {
		p.unfinished = map[string]error{}
	}
	p.unfinished[app] = err
}
