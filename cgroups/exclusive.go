package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// NewChild is Child for a group that must not exist yet: it fails with an
// error satisfying errors.Is(err, os.ErrExist) if it does in any hierarchy,
// and then leaves every hierarchy as it found it. A pod's cgroup is named
// after its UUID: a second pod run with the UUID of a running one would
// otherwise share its cgroups, and kill it when removing them.
func (g *Group) NewChild(name string) (*Group, error) {
	c := &Group{V1: map[string]string{}, Unified: g.Unified}
	if g.V2 != "" {
		c.V2 = filepath.Join(g.V2, name)
	}
	for k, d := range g.V1 {
		c.V1[k] = filepath.Join(d, name)
	}
	var made []string
	for _, d := range c.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			for _, m := range made {
				_ = os.Remove(m)
			}
			if errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("cgroup %s: %w", d, os.ErrExist)
			}
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		made = append(made, d)
	}
	return c, nil
}
