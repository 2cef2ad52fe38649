package netinfo

import (
	"fmt"
	"strings"
)

// The --net list is checked here, a package without CNI, so that the run
// entry point and pod1 run refuse a bad one before anything starts:
// net-setup, which parses the list again, runs only for pods with
// networks, after the pod's PID 1 exists.

// Request is one entry of --net: a network name and its CNI_ARGS.
type Request struct {
	Name string
	Args string
}

// ParseNetList parses --net as rkt does (common.NetList): a comma list of
// NAME or NAME:ARGS, ARGS being K=V pairs separated by ';'. Unlike rkt,
// "none" and "host" stand alone: rkt's stage1 set up loopback only when
// "none" was among others and dropped the rest unsaid, so
// --net=none,default ran a pod without the network asked for (and an
// invalid name beside none went unnoticed). rkt's stage0 passes the list
// as the user gave it, or "default".
func ParseNetList(s string) ([]Request, error) {
	var rs []Request
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, args, hasArgs := strings.Cut(part, ":")
		switch {
		case name == "":
			return nil, fmt.Errorf("--net=%q: empty network name", s)
		case strings.Contains(args, ":"):
			return nil, fmt.Errorf("--net: network %q: invalid arguments %q", name, args)
		case hasArgs && (name == "all" || name == "host" || name == "none"):
			return nil, fmt.Errorf("--net: arguments are not supported by the special network %q", name)
		case seen[name]:
			return nil, fmt.Errorf("--net: network %q given twice", name)
		}
		if name != "all" && name != "host" && name != "none" && !ValidName(name) {
			return nil, fmt.Errorf("--net: %q is not a valid network name", name)
		}
		if _, err := CNIArgs(args); err != nil {
			return nil, fmt.Errorf("--net: network %q: %w", name, err)
		}
		seen[name] = true
		rs = append(rs, Request{Name: name, Args: args})
	}
	if len(rs) > 1 {
		for _, special := range []string{"none", "host"} {
			if seen[special] {
				return nil, fmt.Errorf("--net=%q: %s cannot be combined with other networks", s, special)
			}
		}
	}
	return rs, nil
}

// CNIArgs splits a network's arguments into CNI_ARGS pairs.
func CNIArgs(s string) ([][2]string, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > 4096 || strings.ContainsAny(s, "\x00\n") {
		return nil, fmt.Errorf("arguments too long or hold control characters")
	}
	var kv [][2]string
	for _, p := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("argument %q is not K=V", p)
		}
		kv = append(kv, [2]string{k, v})
	}
	return kv, nil
}
