package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pod1/pod1/safefile"
)

// RecordSuffix names an app's JSON record beside its plain status file:
// "<app>.json". An ACName has no dot, so it cannot collide with an app's
// plain status file or stage0's "-created"/"-started" markers.
const RecordSuffix = ".json"

// App states in a Record.
const (
	StateAdded      = "added"      // in a mutable pod, not started yet
	StateRunning    = "running"    // started (setting up or exec'd)
	StateRestarting = "restarting" // exited, waiting out its backoff
	StateExited     = "exited"     // finished for good
	StateRemoving   = "removing"   // being removed from a mutable pod
)

// Failure reasons in a Record.
const (
	ReasonExit   = "exit"   // non-zero exit code
	ReasonSignal = "signal" // killed by a signal
	ReasonExec   = "exec"   // the executable could not be run (126/127)
	ReasonSetup  = "setup"  // the stage1 could not set the app up (254)
	ReasonOOM    = "oom"    // killed by the kernel's OOM killer in its cgroup
)

// Record is the detailed, JSON status of one app, rewritten atomically at
// every start and exit. Host tools read it; rkt reads only the plain
// "<app>" file, which is written once, when the app is finished for good.
type Record struct {
	App   string `json:"app"`
	State string `json:"state"`
	// Pid is the app's first process as the host sees it (0 when not
	// running); PodPid is the same process inside the pod.
	Pid    int `json:"pid,omitempty"`
	PodPid int `json:"podPid,omitempty"`
	// ExitCode and Signal describe the last run's end; Signal is the
	// signal's name when a signal killed it.
	ExitCode     *int       `json:"exitCode,omitempty"`
	Signal       string     `json:"signal,omitempty"`
	StartedAt    *time.Time `json:"startedAt,omitempty"`
	FinishedAt   *time.Time `json:"finishedAt,omitempty"`
	RestartCount int        `json:"restartCount"`
	// StoppedByPod: the pod stopped this run because another app
	// failed; StatusCode is then what the plain status file records
	// (0, as rkt's stage1 records such an app), while ExitCode and
	// Signal say how the run really ended.
	StoppedByPod bool `json:"stoppedByPod,omitempty"`
	StatusCode   *int `json:"statusCode,omitempty"`
	// LastFailure is the reason of the last run that failed, if any.
	LastFailure string `json:"lastFailure,omitempty"`
	// LogDropped counts the app's output lines a log sink could not
	// take (a full or dead journal, a full disk): they reached the
	// console only.
	LogDropped uint64 `json:"logDropped,omitempty"`
	// ConsoleDropped counts the bytes of the app's output the console
	// (the stdout or stderr of rkt run) did not take, because it went
	// away or stayed full: they reached the log sinks only.
	ConsoleDropped uint64 `json:"consoleDropped,omitempty"`
	// SyslogDropped counts the app's messages to /dev/log dropped for
	// coming faster than the rate an app may log at.
	SyslogDropped uint64 `json:"syslogDropped,omitempty"`
}

// MarshalRecord encodes a record; times are RFC 3339 with nanoseconds
// (encoding/json's time format).
func MarshalRecord(r *Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteRecord atomically replaces the app's JSON record (not durably: the
// next Write of a status in the directory makes it so).
func (d *Dir) WriteRecord(r *Record) error {
	b, err := MarshalRecord(r)
	if err != nil {
		return fmt.Errorf("encode record of %s: %w", r.App, err)
	}
	return d.d.WriteReserved(r.App+RecordSuffix, b, filePerm, safefile.Volatile)
}

// ReadRecord reads the app's JSON record from the status directory dir.
func ReadRecord(dir, app string) (*Record, error) {
	d, err := OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	b, err := d.readFile(app+RecordSuffix, 1<<20)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: record of %s: %w", ErrMalformed, app, err)
	}
	if r.App != app {
		return nil, fmt.Errorf("%w: record of %s names app %q", ErrMalformed, app, r.App)
	}
	return &r, nil
}

var errTooLong = errors.New("file too long")
