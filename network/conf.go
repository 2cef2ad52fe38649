// Package network sets up and tears down a pod's CNI networks the way
// rkt's default stage1 does (rkt networking/): configurations from the
// stage1 image and from <local-config>/net.d, plugins run through libcni
// in a network namespace bind-mounted in the pod directory, the result in
// net-info.json, DNS from the plugins, host ports through portmap. Only
// the net-setup binary links it: the stage1's run, PID 1 and the apps
// never carry CNI code (pods with --net=none or host pay nothing for it).
package network

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/network/netinfo"
	"github.com/pod1/pod1/safefile"
)

// Paths, as rkt has them.
const (
	// UserNetDir is where users put configurations and plugins, below
	// the local configuration directory (--local-config).
	UserNetDir = "net.d"
	// UserPluginDir is the host's directory of third-party plugins.
	UserPluginDir = "/usr/lib/rkt/plugins/net"
)

// maxConfSize bounds a configuration file.
const maxConfSize = 1 << 20

// Request is one entry of --net (netinfo.Request).
type Request = netinfo.Request

// ParseNetList parses --net (netinfo.ParseNetList).
func ParseNetList(s string) ([]Request, error) { return netinfo.ParseNetList(s) }

// Conf is one network configuration file.
type Conf struct {
	Name   string
	Type   string
	IPMasq bool
	// Path is where it was read from; Bytes its content, given to the
	// plugin as is.
	Path  string
	Bytes []byte
}

type confHead struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	CNIVersion string `json:"cniVersion"`
	IPMasq     bool   `json:"ipMasq"`
}

// ParseConf checks a configuration's content: JSON, a valid name, a plugin
// type that is a plain file name.
func ParseConf(path string, b []byte) (*Conf, error) {
	var h confHead
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("network config %s: %w", path, err)
	}
	if !netinfo.ValidName(h.Name) {
		return nil, fmt.Errorf("network config %s: name %q is not a valid network name", path, h.Name)
	}
	if !validPluginName(h.Type) {
		return nil, fmt.Errorf("network %q (%s): plugin type %q is not a plain name", h.Name, path, h.Type)
	}
	return &Conf{Name: h.Name, Type: h.Type, IPMasq: h.IPMasq, Path: path, Bytes: b}, nil
}

func validPluginName(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= 255 && !strings.ContainsAny(s, "/\x00")
}

// readConf reads a configuration file, refusing anything but a regular
// file of bounded size.
func readConf(dir, name string) ([]byte, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return safefile.ReadRegularAt(int(d.Fd()), name, maxConfSize)
}

// loadDir reads every *.conf in dir, by file name; the first of two files
// naming the same network wins, as in rkt.
func loadDir(dir string) (map[string]*Conf, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]*Conf{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("network configs %s: %w", dir, err)
	}
	confs := map[string]*Conf{}
	for _, e := range ents { // ReadDir sorts by name
		if !strings.HasSuffix(e.Name(), ".conf") || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := readConf(dir, e.Name())
		if err != nil {
			return nil, fmt.Errorf("network config %s: %w", path, err)
		}
		c, err := ParseConf(path, b)
		if err != nil {
			return nil, err
		}
		if _, dup := confs[c.Name]; dup {
			logx.Warnf("network %q already defined, ignoring %s", c.Name, path)
			continue
		}
		confs[c.Name] = c
	}
	return confs, nil
}

// Load picks the configurations of the requested networks: the stage1's
// built-in ones, overridden by the user's of the same name, in the order
// of their file names (rkt's order). "all" takes every one found. A name
// found nowhere is an error naming it.
func Load(stage1Root, localConfig string, reqs []Request) ([]*Conf, error) {
	confs, err := loadDir(filepath.Join(stage1Root, layout.NetConfDirIn))
	if err != nil {
		return nil, err
	}
	if localConfig != "" {
		user, err := loadDir(filepath.Join(localConfig, UserNetDir))
		if err != nil {
			return nil, err
		}
		for name, c := range user {
			confs[name] = c
		}
	}
	all := false
	want := map[string]bool{}
	for _, r := range reqs {
		if r.Name == "all" {
			all = true
			continue
		}
		want[r.Name] = true
	}
	var out []*Conf
	var missing []string
	for name := range want {
		if confs[name] == nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("network %q: no such network (no configuration with that name in %s or %s)",
			strings.Join(missing, `", "`), filepath.Join(localConfig, UserNetDir), layout.NetConfDirIn)
	}
	for name, c := range confs {
		if all || want[name] {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		bi, bj := filepath.Base(out[i].Path), filepath.Base(out[j].Path)
		if bi != bj {
			return bi < bj
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// PluginDirs is where plugins are looked for, first match wins: the local
// configuration's net.d, the host's rkt plugin directory, then the
// stage1's own (rkt's order).
func PluginDirs(stage1Root, localConfig string) []string {
	var dirs []string
	if localConfig != "" {
		dirs = append(dirs, filepath.Join(localConfig, UserNetDir))
	}
	return append(dirs, UserPluginDir, filepath.Join(stage1Root, layout.NetPluginDirIn))
}
