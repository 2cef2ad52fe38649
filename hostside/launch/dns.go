package launch

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/resolvconf"
)

// dnsConfModeMinVersion is the first stage1 interface version that takes
// --dns-conf-mode (rkt stage0/manifest.go).
const dnsConfModeMinVersion = 4

// DNS is rkt run's --dns, --dns-search, --dns-opt and --dns-domain.
type DNS struct {
	Servers []string // addresses, or one of "host" and "none"
	Search  []string
	Options []string
	Domain  string
}

// resolvMode is what the flags ask of the stage1, as rkt's parseDNSFlags
// has it: "host" (the host's resolv.conf), "none" (no resolv.conf, not
// even a network's), "stage0" (the one we write), or "default" (a
// network's DNS answer, if any).
func (d *DNS) resolvMode() (string, error) {
	mode := "default"
	var servers int
	for _, s := range d.Servers {
		switch {
		case s == "host" || s == "none":
			if len(d.Servers) > 1 {
				return "", fmt.Errorf("--dns=%s cannot be combined with other --dns values", s)
			}
			mode = s
		case net.ParseIP(s) == nil:
			return "", fmt.Errorf("--dns=%q: not an IP address, host or none", s)
		default:
			servers++
		}
	}
	for _, l := range [][]string{d.Search, d.Options, {d.Domain}} {
		for _, v := range l {
			if strings.ContainsAny(v, " \t\r\n\x00#;") {
				return "", fmt.Errorf("DNS setting %q: holds white space or a comment character", v)
			}
		}
	}
	if servers > 0 || len(d.Search) > 0 || len(d.Options) > 0 || d.Domain != "" {
		if mode != "default" {
			return "", fmt.Errorf("--dns-search, --dns-opt and --dns-domain cannot be used with --dns=%s", mode)
		}
		mode = "stage0"
	}
	return mode, nil
}

// resolvConf is the resolv.conf the flags describe, in rkt's layout.
func (d *DNS) resolvConf() []byte {
	return resolvconf.Render("pod1 run", d.Servers, d.Search, d.Options, d.Domain)
}

// writeResolvConf writes <stage1>/etc/rkt-resolv.conf when the stage1 is
// to use it (resolv=stage0), as rkt's stage0 does before exec'ing it.
func writeResolvConf(p *Prepared, o Options) error {
	mode, err := o.DNS.resolvMode()
	if err != nil || mode != "stage0" {
		return err
	}
	path := filepath.Join(p.Dir, layout.Stage1RootFS, layout.HostResolvIn)
	if err := os.MkdirAll(filepath.Dir(path), dirPerm); err != nil {
		return fmt.Errorf("stage1 etc: %w", err)
	}
	if err := writePodFile(path, o.DNS.resolvConf(), 0o644); err != nil {
		return fmt.Errorf("rkt-resolv.conf: %w", err)
	}
	return nil
}
