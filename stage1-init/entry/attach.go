package entry

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/control"
	"github.com/pod1/pod1/logx"
	"github.com/pod1/pod1/podattach"
	"github.com/pod1/pod1/status"
)

const roleAttach = "attach"

// attachMain is the attach entry point (coreos.com/rkt/stage1/attach; cwd
// = the pod directory), as rkt attach runs it:
//
//	--action=list|auto-attach|custom-attach --app=NAME --debug=BOOL
//	[--tty-in=BOOL --tty-out=BOOL --stdin=BOOL --stdout=BOOL --stderr=BOOL]
//
// list prints the app's endpoints (rkt's JSON); the others proxy between
// our stdin, stdout and stderr and the sockets PID 1 serves for the app
// (podattach), until the app's output ends or the caller detaches.
func attachMain(args []string) int {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	action := fs.String("action", "list", "")
	app := fs.String("app", "", "")
	fs.Bool("debug", false, "")
	var sel podattach.Selection
	fs.BoolVar(&sel.TTYIn, "tty-in", false, "")
	fs.BoolVar(&sel.TTYOut, "tty-out", false, "")
	fs.BoolVar(&sel.Stdin, "stdin", false, "")
	fs.BoolVar(&sel.Stdout, "stdout", false, "")
	fs.BoolVar(&sel.Stderr, "stderr", false, "")
	if err := fs.Parse(args); err != nil {
		return fail(fmt.Errorf("attach: %w", err))
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("attach: unexpected argument %q", fs.Arg(0)))
	}
	if _, err := types.NewACName(*app); err != nil {
		return fail(fmt.Errorf("attach: --app: %q: %w", *app, err))
	}
	if *action != "list" && !diesWithCaller() {
		return 0 // the caller is gone already: nobody to proxy for
	}
	var err error
	switch *action {
	case "list":
		err = podattach.List(*app, os.Stdout)
	case "auto-attach", "auto":
		sel.Auto = true
		err = podattach.Attach(*app, sel, helloPID1, os.Stdin, os.Stdout, os.Stderr)
	case "custom-attach", "custom":
		if !sel.TTYIn && !sel.TTYOut && !sel.Stdin && !sel.Stdout && !sel.Stderr {
			return fail(fmt.Errorf("attach: custom-attach: no endpoint selected"))
		}
		err = podattach.Attach(*app, sel, helloPID1, os.Stdin, os.Stdout, os.Stderr)
	default:
		return fail(fmt.Errorf("attach: --action: %s is not one of list, auto-attach, custom-attach", strconv.Quote(*action)))
	}
	if err != nil {
		logx.Errorf("%v", err)
		return status.CodeStage1Failure
	}
	return 0
}

// helloPID1 is the attach entry point's hello (cwd = the pod directory).
func helloPID1(c net.Conn) error { return control.Hello(c, ".") }

// diesWithCaller makes the kernel kill this process when the one that
// started it (rkt attach) dies, and reports false if that has happened
// already. A proxy whose caller was killed would otherwise live on,
// reparented, holding the caller's caller's pipes open (it never writes
// to an app that says nothing, so it never sees EPIPE) and the app's
// attach sockets. It has nothing to clean up: the terminal's modes are
// rkt's business, and PID 1 takes a closed connection in its stride.
func diesWithCaller() bool {
	ppid := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		logx.Warnf("attach: PR_SET_PDEATHSIG: %v", err)
		return true
	}
	// Died between our start and the prctl: we were reparented.
	return os.Getppid() == ppid
}
