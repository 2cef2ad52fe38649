package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pod1/pod1/hostside/pods"
)

// timeLayout is rkt's defaultTimeLayout, used for created=/started= and
// list --full ("2026-11-29 22:29:20.396 +0000 UTC").
const timeLayout = "2006-01-02 15:04:05.999 -0700 MST"

// outputFormat is rkt's --format: "" (key=value or table), json or
// json-pretty.
type outputFormat string

func (f *outputFormat) String() string { return string(*f) }

func (f *outputFormat) Set(s string) error {
	switch s {
	case "", "json", "json-pretty":
		*f = outputFormat(s)
		return nil
	}
	return fmt.Errorf("format %q: want json or json-pretty", s)
}

// writeJSON prints v as rkt does for --format=json / json-pretty.
func writeJSON(w io.Writer, f outputFormat, v any) error {
	var b []byte
	var err error
	if f == "json-pretty" {
		b, err = json.MarshalIndent(v, "", "\t")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// jsonPod is rkt's api/v1 Pod, field for field: rkt's own status and list
// print this shape, and scripts parse it. Times are in seconds for the pod
// and in nanoseconds for its apps, as in rkt.
type jsonPod struct {
	UUID            string            `json:"name"`
	State           string            `json:"state"`
	Networks        []json.RawMessage `json:"networks,omitempty"`
	AppNames        []string          `json:"app_names,omitempty"`
	Apps            []*jsonApp        `json:"apps,omitempty"`
	CreatedAt       *int64            `json:"created_at,omitempty"`
	StartedAt       *int64            `json:"started_at,omitempty"`
	UserAnnotations map[string]string `json:"user_annotations,omitempty"`
	UserLabels      map[string]string `json:"user_labels,omitempty"`
}

// jsonApp is rkt's api/v1 App plus "record", pod1's addition: what the
// stage1's JSON record knows that rkt's files do not. It is a separate
// object so that every field rkt defines keeps rkt's exact meaning.
type jsonApp struct {
	Name            string            `json:"name"`
	State           string            `json:"state"`
	CreatedAt       *int64            `json:"created_at,omitempty"`
	StartedAt       *int64            `json:"started_at,omitempty"`
	FinishedAt      *int64            `json:"finished_at,omitempty"`
	ExitCode        *int32            `json:"exit_code,omitempty"`
	ImageID         string            `json:"image_id"`
	Mounts          []jsonMount       `json:"mounts,omitempty"`
	UserAnnotations map[string]string `json:"user_annotations,omitempty"`
	UserLabels      map[string]string `json:"user_labels,omitempty"`
	Record          *jsonRecord       `json:"record,omitempty"`
}

type jsonMount struct {
	Name          string `json:"name"`
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	ReadOnly      bool   `json:"read_only"`
}

// jsonRecord is an app's status.Record: the app's own start and finish
// times (nanoseconds), its host pid while it runs, how its last run ended
// (stopped_by_pod: the pod stopped it because another app failed, and the
// app's exit_code above is then rkt's 0), and how often it was restarted.
type jsonRecord struct {
	State        string `json:"state"`
	Pid          int    `json:"pid,omitempty"`
	StartedAt    *int64 `json:"started_at,omitempty"`
	FinishedAt   *int64 `json:"finished_at,omitempty"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	Signal       string `json:"signal,omitempty"`
	RestartCount int    `json:"restart_count"`
	LastFailure  string `json:"last_failure,omitempty"`
	StoppedByPod bool   `json:"stopped_by_pod,omitempty"`
}

func toJSON(p *pods.Pod) *jsonPod {
	jp := &jsonPod{
		UUID:            p.UUID,
		State:           string(p.State),
		CreatedAt:       unixSec(p.Created),
		StartedAt:       unixSec(p.Started),
		UserAnnotations: p.UserAnnotations,
		UserLabels:      p.UserLabels,
	}
	for _, n := range p.Networks {
		jp.Networks = append(jp.Networks, n.Raw)
	}
	for i := range p.Apps {
		a := &p.Apps[i]
		jp.AppNames = append(jp.AppNames, a.Name)
		ja := &jsonApp{
			Name: a.Name, State: string(a.State), ImageID: a.ImageID,
			CreatedAt: unixNanoPtr(a.CreatedAt), StartedAt: unixNanoPtr(a.StartedAt),
			FinishedAt:      unixNanoPtr(a.FinishedAt),
			UserAnnotations: a.UserAnnotations, UserLabels: a.UserLabels,
		}
		if a.ExitCode != nil {
			c := int32(*a.ExitCode)
			ja.ExitCode = &c
		}
		for _, m := range a.Mounts {
			ja.Mounts = append(ja.Mounts, jsonMount(m))
		}
		if r := a.Record; r != nil {
			ja.Record = &jsonRecord{
				State: r.State, Pid: r.Pid, ExitCode: r.ExitCode, Signal: r.Signal,
				StartedAt: unixNanoPtr(r.StartedAt), FinishedAt: unixNanoPtr(r.FinishedAt),
				RestartCount: r.RestartCount, LastFailure: r.LastFailure, StoppedByPod: r.StoppedByPod,
			}
		}
		jp.Apps = append(jp.Apps, ja)
	}
	return jp
}

func unixSec(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	s := t.Unix()
	return &s
}

func unixNanoPtr(t *time.Time) *int64 {
	if t == nil || t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

// fmtNets is rkt's network column: "name:ip4=IP, ...".
func fmtNets(nets []pods.Network) string {
	parts := make([]string, len(nets))
	for i, n := range nets {
		parts[i] = n.Name + ":ip4=" + n.IP
	}
	return strings.Join(parts, ", ")
}

// relTime formats then relative to now the way rkt list does (it uses
// go-humanize's Time): "now", "3 seconds ago", "2 days ago"...
func relTime(then, now time.Time) string {
	d := now.Sub(then)
	suffix := "ago"
	if d < 0 {
		d, suffix = -d, "from now"
	}
	const day, week, month = 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour
	const year = 12 * month
	steps := []struct {
		below time.Duration
		unit  time.Duration
		one   string
		many  string
	}{
		{time.Second, 0, "now", ""},
		{2 * time.Second, 0, "1 second", ""},
		{time.Minute, time.Second, "", "seconds"},
		{2 * time.Minute, 0, "1 minute", ""},
		{time.Hour, time.Minute, "", "minutes"},
		{2 * time.Hour, 0, "1 hour", ""},
		{day, time.Hour, "", "hours"},
		{2 * day, 0, "1 day", ""},
		{week, day, "", "days"},
		{2 * week, 0, "1 week", ""},
		{month, week, "", "weeks"},
		{2 * month, 0, "1 month", ""},
		{year, month, "", "months"},
		{18 * month, 0, "1 year", ""},
		{2 * year, 0, "2 years", ""},
		{37 * year, year, "", "years"},
	}
	for _, s := range steps {
		if d >= s.below {
			continue
		}
		switch {
		case s.one == "now":
			return "now"
		case s.unit == 0:
			return s.one + " " + suffix
		default:
			return fmt.Sprintf("%d %s %s", d/s.unit, s.many, suffix)
		}
	}
	return "a long while " + suffix
}
