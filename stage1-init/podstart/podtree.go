package podstart

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// podTreeDirs are the directories of the pod directory that run, PID 1
// and the network set-up create, open or write in by path. Each must be a
// directory at every component, or not exist yet: a symlink planted at
// any of them (stage1/rootfs/rkt/pod1 pointing at /etc, say) would make
// run, as host root, create and write its files where the link points.
var podTreeDirs = []string{
	layout.Stage1RootFS,
	layout.StatusDir,
	layout.EnvDir,
	layout.AppSpecDir,
	layout.AttachDir,
	layout.DevLogDir,
	layout.Stage2Dir,
	layout.Stage1RootFS + "/etc",
	layout.LogDir,
	layout.SharedVolumes,
	layout.AppsInfo,
	layout.NetDir,
}

// checkPodTree refuses a pod directory in which a path of podTreeDirs
// leads through a symlink or a file that is not a directory. It walks
// each path one component at a time from the pod directory's fd, never
// following a symlink, so that the component to blame is named. Run
// holds the pod's lock from here on, and the stage1 tree is written only
// by root: nothing that was checked is replaced behind run's back by
// someone who could not already plant it before.
func checkPodTree(podDir string) error {
	root, err := unix.Open(podDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("pod directory: %w", err)
	}
	defer unix.Close(root)
	checked := map[string]bool{}
	for _, p := range podTreeDirs {
		if err := checkDirPath(root, p, checked); err != nil {
			return err
		}
	}
	return nil
}

func checkDirPath(root int, rel string, checked map[string]bool) error {
	parts := strings.Split(rel, "/")
	fd := root
	defer func() {
		if fd != root {
			unix.Close(fd)
		}
	}()
	for i, name := range parts {
		sofar := strings.Join(parts[:i+1], "/")
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			// Made later, by whoever needs it, in a directory
			// that is one.
			return nil
		}
		if err != nil {
			return fmt.Errorf("pod directory: %s: %w", sofar, err)
		}
		if fd != root {
			unix.Close(fd)
		}
		fd = next
		if checked[sofar] {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("pod directory: %s: %w", sofar, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			checked[sofar] = true
		case unix.S_IFLNK:
			return fmt.Errorf("pod directory: %s is a symlink, want a directory", sofar)
		default:
			return fmt.Errorf("pod directory: %s is not a directory", sofar)
		}
	}
	return nil
}
