// Command pod1 runs pods with the pod1 stage1 without needing rkt: `pod1
// run` prepares a pod directory exactly as rkt v1.30.0's stage0 does and
// execs the stage1, so pods started by pod1 and by rkt are interchangeable
// for every tool that reads the pod directory.
//
// Subcommands live in their own files and are listed in the commands table
// below; each parses its own flags with Go's flag package.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pod1/pod1/hostside/launch"
	"github.com/pod1/pod1/logx"
)

// exitError is rkt's exit code for its own failures (usage included), which
// callers cannot confuse with an app's code.
const exitError = 254

// command is one subcommand. run gets the arguments after the command
// name and returns the process exit code.
type command struct {
	name    string
	summary string
	run     func(g *globalFlags, args []string, stdout, stderr io.Writer) int
}

// commands is the dispatch table; each command lives in its own file.
var commands = []command{
	{"run", "prepare a pod from ACI images and exec the stage1 (exit code is the pod's)", cmdRun},
	{"status", "print a pod's state, pid and app exit codes", cmdStatus},
	{"list", "list pods and their apps", cmdList},
	{"enter", "run a command inside a running pod's app", cmdEnter},
	{"stop", "stop running pods through their stage1", cmdStop},
	{"logs", "print the output of a pod's apps, from the journal or its log files", cmdLogs},
	{"gc", "garbage-collect exited, aborted and expired pods", cmdGC},
	{"app", "dynamic pods: sandbox, add, start, stop, rm, list, status", cmdApp},
	{"version", "print pod1's version, its stage1 image's version label", cmdVersion},
}

// version is pod1's (git describe), set by the Makefile; the stage1 image
// built with this pod1 carries it as its version label.
var version = "dev"

func cmdVersion(_ *globalFlags, args []string, stdout, stderr io.Writer) int {
	if len(args) != 0 {
		fail(stderr, "version", fmt.Errorf("takes no arguments, got %q", args[0]))
		return exitError
	}
	fmt.Fprintf(stdout, "pod1 %s\n", version)
	return 0
}

// globalFlags are rkt's global flags. They may be given before the command
// (`pod1 --dir=X run`) as with rkt, or among the command's flags.
type globalFlags struct {
	dir             string
	debug           bool
	insecureOptions string
}

// register adds the global flags to fs, with their current values as
// defaults so a value given before the command survives the command's parse.
func (g *globalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.dir, "dir", g.dir, "rkt data directory")
	fs.BoolVar(&g.debug, "debug", g.debug, "print debug output and pass --debug to the stage1")
	fs.StringVar(&g.insecureOptions, "insecure-options", g.insecureOptions, "accepted for rkt compatibility and ignored (pod1 does not verify signatures)")
}

// parseOne parses args[0] if it is a global flag (taking its value from
// args[1] when not written as --flag=value) and returns how many words it
// used, 0 when args[0] is not one. The commands whose arguments are not
// parsed by a flag set of their own (app, app add, the image list of run)
// take the global flags anywhere before an app's "--" with it, as rkt's
// persistent flags are: no app flag has a global flag's name, so a word is
// never both.
func (g *globalFlags) parseOne(args []string) (int, error) {
	if len(args) == 0 || len(args[0]) < 2 || args[0][0] != '-' || args[0] == argsStart || args[0] == appEnd {
		return 0, nil
	}
	fs := newFlagSet("pod1")
	g.register(fs)
	name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
	f := fs.Lookup(name)
	if f == nil {
		return 0, nil
	}
	n := 1
	if !hasValue && !isBool(f) {
		if len(args) < 2 {
			return 0, fmt.Errorf("flag needs an argument: %s", args[0])
		}
		n = 2
	}
	if err := fs.Parse(args[:n]); err != nil {
		return 0, err
	}
	if g.debug {
		logx.SetDebug(true)
	}
	return n, nil
}

func main() {
	os.Exit(pod1Main(os.Args[1:], os.Stdout, os.Stderr))
}

// pod1Main is main without the exit, so tests can drive it in-process.
func pod1Main(args []string, stdout, stderr io.Writer) int {
	g := &globalFlags{dir: launch.DefaultDir}
	fs := newFlagSet("pod1")
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return 0
		}
		fail(stderr, "pod1", err)
		return exitError
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fail(stderr, "pod1", errors.New("no command given (try pod1 --help)"))
		return exitError
	}
	logx.SetOutput(stderr)
	logx.SetRole("pod1", rest[0])
	if g.debug {
		logx.SetDebug(true)
	}
	for _, c := range commands {
		if c.name == rest[0] {
			return c.run(g, rest[1:], stdout, stderr)
		}
	}
	fail(stderr, "pod1", fmt.Errorf("unknown command %q (try pod1 --help)", rest[0]))
	return exitError
}

// newFlagSet returns a flag set that reports errors to us instead of
// printing usage, so every failure is one line.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// fail prints `<prefix>: <error>` as a single line: appc's JSON errors
// embed newlines, and scripts read the first line.
func fail(w io.Writer, prefix string, err error) {
	msg := strings.NewReplacer("\r", " ", "\n", " ").Replace(err.Error())
	fmt.Fprintf(w, "%s: %s\n", prefix, strings.TrimSpace(msg))
}

// parseCommand parses a command's flags, which may be mixed with its
// arguments as with rkt's (pflag's) commands, up to a "--". done is set
// when the command must return code at once: after --help, or after a bad
// flag was reported in one line (254, rkt's code for usage errors too).
func parseCommand(fs *flag.FlagSet, args []string, help string, stdout, stderr io.Writer, prefix string) (code int, done bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(stdout, help)
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				fs.SetOutput(io.Discard)
				return 0, true
			}
			fail(stderr, prefix, err)
			return exitError, true
		}
		rest := fs.Args()
		// flag stops at "--" (and drops it) or at the first argument.
		if len(rest) == 0 || len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Parse again with no arguments so that fs.Args() returns ours.
	_ = fs.Parse(append([]string{"--"}, positional...))
	return 0, false
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: pod1 [global flags] <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nglobal flags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
