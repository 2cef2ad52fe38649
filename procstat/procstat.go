// Package procstat reads /proc/PID/stat (proc(5)): the one parser of it
// for the stage1, whose command name, chosen by the process, may hold
// spaces and parentheses.
package procstat

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// Stat is the fields of a /proc/PID/stat after the command name: Stat[0]
// is proc(5)'s field 3 (the state), Stat[1] field 4 (the parent's pid).
type Stat []string

// Parse splits a /proc/PID/stat after its command name, which ends at the
// last ')'.
func Parse(b []byte) (Stat, bool) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return nil, false
	}
	return Stat(f), true
}

// Read reads and parses pid's stat in the caller's procfs.
func Read(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	return Parse(b)
}

// PPid is the parent's pid.
func (s Stat) PPid() (int, bool) {
	n, err := strconv.Atoi(s[1])
	return n, err == nil
}

// CPU is the user and system time of the process, its threads' together,
// counted in USER_HZ (100 on every Linux).
func (s Stat) CPU() (time.Duration, bool) {
	// utime and stime: proc(5)'s fields 14 and 15.
	if len(s) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(s[11], 10, 63)
	k, err2 := strconv.ParseUint(s[12], 10, 63)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+k) * (time.Second / 100), true
}
