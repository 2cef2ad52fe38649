package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/network/netinfo"
)

// Teardown undoes Setup, from what the pod directory records: the DEL of
// every network in net-info.json (last first), its port forwards before
// it, then the namespace's bind mount and the stage1's files. It is
// idempotent, and works on a setup killed at any point. Everything it
// reads may have been planted: entries that do not validate are reported
// and skipped, plugins are looked up only by their plain type name, and
// the namespace is the one of the pod's UUID, used only if it is one and
// not the host's (the content of <pod>/netns is never followed).
// If a DEL fails, its entry and configuration copy are kept for a retry
// (which runs without the namespace: what is left to undo is on the
// host, rules and leases) and an error is returned. The namespace's bind
// mount goes either way: rkt deletes the pod whatever its stage1's gc
// says, and a mount under /var/run/netns would outlive it, holding the
// pod's interfaces.
func Teardown(ctx context.Context, podDir, stage1Root, localConfig, uuid string, debug bool) error {
	// Last, after this teardown's own cache is gone: what a killed
	// net-setup of the pod left (cacheDirPrefix).
	defer removeLeftCaches(uuid)
	dir, err := os.Open(podDir)
	if err != nil {
		return err
	}
	defer dir.Close()
	nis, err := netinfo.LoadAt(int(dir.Fd()))
	switch {
	case errors.Is(err, netinfo.ErrNone):
		nis = nil
	case err != nil:
		logx.Warnf("teardown: %v; not tearing down the networks it lists", err)
		nis = nil
	}
	ns, err := openNetns(uuid)
	if err != nil {
		logx.Warnf("teardown: %v; tearing down without it", err)
	}
	pe := &pluginExec{debug: debug}
	if ns != nil {
		defer ns.Close()
	}
	// libcni's result cache is a directory of our own, never one in the
	// pod directory: libcni reads it whole and follows symlinks, and a
	// planted one would make gc read any host file (or /dev/zero). DEL
	// then runs without the previous result, which the spec allows and
	// the shipped plugins do not need.
	cache, err := os.MkdirTemp("", cacheDirPrefix(uuid))
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(cache) }()
	cni := libcni.NewCNIConfigWithCacheDir(PluginDirs(stage1Root, localConfig), cache, pe)
	var failed []netinfo.NetInfo
	var errs []error
	for i := len(nis) - 1; i >= 0; i-- {
		ni := &nis[i]
		if err := delNet(ctx, cni, podDir, ni, uuid, ns != nil, debug); err != nil {
			errs = append(errs, fmt.Errorf("network %q: %w", ni.NetName, err))
			failed = append([]netinfo.NetInfo{*ni}, failed...)
		}
	}
	if err := removeNetns(podDir, uuid); err != nil {
		errs = append(errs, err)
	}
	if len(failed) > 0 {
		if err := netinfo.SaveIn(podDir, failed); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return removeNetFiles(podDir)
}

func delNet(ctx context.Context, cni *libcni.CNIConfig, podDir string, ni *netinfo.NetInfo, uuid string, haveNS, debug bool) error {
	rt := runtimeConf(ni, uuid)
	if !haveNS {
		rt.NetNS = ""
	}
	if len(ni.Ports) > 0 {
		nc, err := portmapConf(ni, nil)
		if err != nil {
			return err
		}
		prt := portmapRuntime(ni, uuid)
		prt.NetNS = rt.NetNS
		if err := cni.DelNetwork(ctx, nc, prt); err != nil {
			return fmt.Errorf("port forwards: %w", err)
		}
	}
	b, err := readConf(filepath.Join(podDir, layout.NetDir), ni.NetName+".conf")
	if err != nil {
		// The copy is written before the entry: without it there is
		// nothing this stage1 set up.
		if errors.Is(err, os.ErrNotExist) {
			logx.Warnf("teardown: network %q: its configuration copy is gone; skipping", ni.NetName)
			return nil
		}
		return fmt.Errorf("configuration copy: %w", err)
	}
	c, err := ParseConf(ni.ConfPath, b)
	if err != nil {
		logx.Warnf("teardown: %v; skipping", err)
		return nil
	}
	if c.Name != ni.NetName {
		logx.Warnf("teardown: network %q: its configuration copy names %q; skipping", ni.NetName, c.Name)
		return nil
	}
	nc, err := libcni.NetworkPluginConfFromBytes(c.Bytes)
	if err != nil {
		logx.Warnf("teardown: network %q: %v; skipping", ni.NetName, err)
		return nil
	}
	if debug {
		// rkt's stage1 line, word for word, which rkt's tests look
		// for at the end of gc's output: not in logx's format.
		fmt.Fprintf(logx.Writer(), "stage1: teardown - executing net-plugin %s\n", c.Type)
	}
	return cni.DelNetwork(ctx, nc, rt)
}

// openNetns opens the pod's network namespace at its path under
// /var/run/netns if it is there and is a network namespace other than
// ours (gc runs in the host's).
func openNetns(uuid string) (*os.File, error) {
	p := netinfo.NetnsPath(uuid)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		f.Close()
		return nil, fmt.Errorf("statfs %s: %w", p, err)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		f.Close()
		return nil, nil // created, but never bound: no namespace to enter
	}
	var st, self unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		f.Close()
		return nil, err
	}
	if st.Dev == self.Dev && st.Ino == self.Ino {
		f.Close()
		return nil, fmt.Errorf("%s is the host's network namespace", p)
	}
	if t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWNET {
		f.Close()
		return nil, fmt.Errorf("%s is not a network namespace", p)
	}
	return f, nil
}

// removeNetns removes the bind mount of the pod's namespace and
// <pod>/netns, the record of it (unmounted first, in case something was
// mounted on it: it is in the pod directory).
func removeNetns(podDir, uuid string) error {
	for _, p := range []string{netinfo.NetnsPath(uuid), filepath.Join(podDir, layout.Netns)} {
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}

// removeNetFiles removes the stage1's network files, once every DEL is
// done.
func removeNetFiles(podDir string) error {
	if err := os.RemoveAll(filepath.Join(podDir, layout.NetDir)); err != nil {
		return fmt.Errorf("remove %s: %w", layout.NetDir, err)
	}
	if err := os.Remove(filepath.Join(podDir, layout.NetInfo)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", layout.NetInfo, err)
	}
	return nil
}
