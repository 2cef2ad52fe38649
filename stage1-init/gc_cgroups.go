//go:build !pod1init

package main

import "github.com/pod1/pod1/cgroups"

// gcCgroups removes the pod's cgroups (cwd is the pod directory), which
// the run entry point leaves emptied: see cgroups.RemovePod.
func gcCgroups(uuid string) error { return cgroups.RemovePod(".", uuid) }
