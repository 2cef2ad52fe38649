package netinfo

import (
	"fmt"
	"strings"
)

// CheckHostname refuses a pod host name that the apps' /etc/hostname and
// /etc/hosts, and the kernel's UTS name, cannot hold as it is: at most 64
// bytes (the kernel's field), dot-separated labels of 1 to 63 letters,
// digits, hyphens and underscores, none starting or ending with a hyphen
// (RFC 1123 with the underscore systemd's hostname check, and so
// systemd-nspawn and rkt's stage1, accept: rkt's
// TestPrepareAppCheckEtcHostname sets "custom_hostname_setting"). A newline in it added a line
// to every app's /etc/hosts. It is here, beside the --net list, so that
// the run entry point and pod1 run share it.
func CheckHostname(h string) error {
	if h == "" || len(h) > 64 {
		return fmt.Errorf("--hostname=%q: want 1 to 64 characters", h)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("--hostname=%q: want dot-separated labels of 1 to 63 characters", h)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("--hostname=%q: a label starts or ends with '-'", h)
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !ldh(c) {
				return fmt.Errorf("--hostname=%q: want letters, digits, '-', '_' and '.' only", h)
			}
		}
	}
	return nil
}

// ldh reports whether c is a letter, a digit, a hyphen or an underscore.
func ldh(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
