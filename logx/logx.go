// Package logx is the one logger of every pod1 process: the stage1's roles
// (run, PID 1, the app set-up, the lock keeper, enter, stop, gc, the app
// operations, net-setup) and the host tools. They share one stderr, so
// each line says which program, role and process wrote it, and how much
// it matters:
//
//	stage1: pod1-init[1] debug: app "web": started as pid 3
//	stage1: pod1-init[1] warning: app "web": write record: ...
//	stage1: app "web": isolator os/linux/cpu-shares: ...
//
// An error line, the one line a failing process leaves, is the program's
// name and the message only: it is the interface users and rkt read (rkt
// prints its stage1's failures as "stage1: <why>", and its own tests match
// "stage1: failed to setup network"), so it stays exactly that.
//
// Debug lines are printed only with --debug. An entry point that parses
// --debug calls SetDebug, which also sets DebugEnv for every process it
// starts (each inherits its environment), so one --debug reaches every
// role of the pod; apps never see it (their environment is their own).
// It imports nothing of pod1.
package logx

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
)

// DebugEnv carries --debug from a process to the ones it starts.
const DebugEnv = "POD1_DEBUG"

var (
	mu     sync.Mutex
	out    io.Writer = os.Stderr
	prefix           = "pod1: " + roleOf(os.Args) + "[" + strconv.Itoa(os.Getpid()) + "] "
	prog             = "pod1: "
	debug            = os.Getenv(DebugEnv) == "1"
)

func roleOf(args []string) string {
	if len(args) == 0 {
		return "?"
	}
	s := args[0]
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return s[i+1:]
		}
	}
	return s
}

// SetRole names the program ("stage1", "pod1") and the role of this
// process in every line it logs. The pid is read again: a role may be a
// re-executed or cloned child.
func SetRole(progName, role string) {
	mu.Lock()
	defer mu.Unlock()
	prefix = progName + ": " + role + "[" + strconv.Itoa(os.Getpid()) + "] "
	prog = progName + ": "
}

// SetDebug turns debug lines on or off for this process and the processes
// it starts from now on.
func SetDebug(on bool) {
	mu.Lock()
	debug = on
	mu.Unlock()
	if on {
		_ = os.Setenv(DebugEnv, "1")
	} else {
		_ = os.Unsetenv(DebugEnv)
	}
}

// Debug says whether debug lines are printed.
func Debug() bool {
	mu.Lock()
	defer mu.Unlock()
	return debug
}

// SetOutput sends the lines to w (a host tool's configured stderr, a test).
func SetOutput(w io.Writer) {
	mu.Lock()
	out = w
	mu.Unlock()
}

// Levels, as they are printed.
const (
	LevelDebug   = "debug"
	LevelInfo    = "info"
	LevelWarning = "warning"
	LevelError   = "error"
)

// Logf writes one line at level. A message is one line: a newline in it
// (from an error's text, which may come from the image) is escaped, so
// nothing in a pod can forge a line of another role.
func Logf(level, format string, a ...any) {
	mu.Lock()
	defer mu.Unlock()
	if level == LevelDebug && !debug {
		return
	}
	msg := fmt.Sprintf(format, a...)
	b := make([]byte, 0, len(prefix)+len(level)+len(msg)+3)
	if level == LevelError {
		b = append(b, prog...)
	} else {
		b = append(b, prefix...)
		b = append(b, level...)
		b = append(b, ": "...)
	}
	for i := 0; i < len(msg); i++ {
		switch c := msg[i]; c {
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		default:
			b = append(b, c)
		}
	}
	b = append(b, '\n')
	_, _ = out.Write(b)
}

// Debugf logs a line only with --debug: what a developer follows a pod by.
func Debugf(format string, a ...any) { Logf(LevelDebug, format, a...) }

// Infof logs something an operator may want to know that is not wrong.
func Infof(format string, a ...any) { Logf(LevelInfo, format, a...) }

// Warnf logs something wrong that the process works around.
func Warnf(format string, a ...any) { Logf(LevelWarning, format, a...) }

// Errorf logs why the process fails.
func Errorf(format string, a ...any) { Logf(LevelError, format, a...) }

// Writer returns the output lines go to (for a panic's stack, which is
// several lines by nature).
func Writer() io.Writer {
	mu.Lock()
	defer mu.Unlock()
	return out
}

// DebugArg says whether args (an entry point's, before any "--") ask for
// --debug. rkt passes --debug to every entry point in its own place among
// the flags; main reads it here once, for every role, and the flag sets
// of the roles accept it and leave it alone.
func DebugArg(args []string) bool {
	on := false
	for _, a := range args {
		switch a {
		case "--":
			return on
		case "--debug", "-debug", "--debug=true", "-debug=true", "--debug=1", "-debug=1":
			on = true
		case "--debug=false", "-debug=false", "--debug=0", "-debug=0":
			on = false
		}
	}
	return on
}
