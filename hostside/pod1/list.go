package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/pod1/pod1/hostside/pods"
)

const listUsage = `usage: pod1 list [--format=json|json-pretty] [--no-legend] [--full]

Lists the pods in prepare/, prepared/, run/ and exited-garbage/, one line
per app, as rkt list does.

flags:`

// cmdList implements `pod1 list` (rkt/list.go).
func cmdList(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	var format outputFormat
	fs := newFlagSet("list")
	g.register(fs)
	fs.Var(&format, "format", "output format: json or json-pretty (default a table)")
	noLegend := fs.Bool("no-legend", false, "suppress the table's header line")
	full := fs.Bool("full", false, "full UUIDs, image IDs and absolute times")
	if code, done := parseCommand(fs, args, listUsage, stdout, stderr, "pod1 list"); done {
		return code
	}
	if fs.NArg() != 0 {
		fail(stderr, "pod1 list", errors.New("takes no arguments"))
		return exitError
	}
	// The table shows a few columns: the JSON output, all of rkt's
	// fields, reads each pod in full.
	detail := pods.Summary
	if format != "" {
		detail = pods.Full
	}
	// The table is written cell by cell: buffered, a list of a thousand
	// pods is one write instead of ten thousand.
	bw := bufio.NewWriter(stdout)
	stdout = bw
	var list []*pods.Pod
	var errs []error
	var err error
	if format != "" {
		list, errs = pods.List(g.dir, pods.IncludeMost, detail)
		// An empty list is [], where rkt prints null: both parse as
		// "no pods", only one can be iterated without a check.
		out := make([]*jsonPod, 0, len(list))
		for _, p := range list {
			out = append(out, toJSON(p))
		}
		err = writeJSON(stdout, format, out)
	} else {
		// Each pod's lines go to the table as soon as it is read,
		// while the workers read on.
		t := newTable(stdout, !*noLegend, *full, time.Now())
		errs = pods.Each(g.dir, pods.IncludeMost, detail, func(p *pods.Pod) {
			t.add(p)
			if p.ManifestErr != nil {
				list = append(list, p)
			}
		})
		err = t.flush()
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		fail(stderr, "pod1 list", err)
		return exitError
	}
	// Like rkt, a pod that cannot be read is reported and the others are
	// listed all the same.
	for _, e := range errs {
		fail(stderr, "pod1 list", e)
	}
	for _, p := range list {
		if p.ManifestErr != nil {
			fail(stderr, "pod1 list", fmt.Errorf("pod %s: %w", p.UUID, p.ManifestErr))
		}
	}
	return 0
}

// table prints rkt list's table: the pod's columns on its first app's
// line only, "-" for a pod without apps.
type table struct {
	tw   *tabwriter.Writer
	full bool
	now  time.Time
	line []byte
	err  error
}

func newTable(w io.Writer, legend, full bool, now time.Time) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 1, '\t', 0), full: full, now: now}
	if legend {
		if full {
			t.cells("UUID", "APP", "IMAGE NAME", "IMAGE ID", "STATE", "CREATED", "STARTED", "NETWORKS")
		} else {
			t.cells("UUID", "APP", "IMAGE NAME", "STATE", "CREATED", "STARTED", "NETWORKS")
		}
	}
	return t
}

// cells writes one line. Lines are put together by hand: Fprintf's
// formatting was a tenth of the time a list of a thousand pods spends on
// its own.
func (t *table) cells(cs ...string) {
	if t.err != nil {
		return
	}
	t.line = t.line[:0]
	for i, c := range cs {
		if i > 0 {
			t.line = append(t.line, '\t')
		}
		t.line = append(t.line, c...)
	}
	_, t.err = t.tw.Write(append(t.line, '\n'))
}

// add writes the pod's lines.
func (t *table) add(p *pods.Pod) {
	uuid, state, nets := p.UUID, string(p.State), fmtNets(p.Networks)
	created, started := tableTime(p.Created, t.full, t.now), tableTime(p.Started, t.full, t.now)
	if !t.full {
		uuid = uuid[:8]
	}
	apps := p.Apps
	if len(apps) == 0 {
		apps = []pods.App{{Name: "-", ImageName: "-", ImageID: "-"}}
	}
	for _, a := range apps {
		img := a.ImageName
		if img == "" {
			img = "--" // rkt's mark for an unreadable image manifest
		}
		if t.full {
			id := a.ImageID
			if len(id) > 19 {
				id = id[:19]
			}
			t.cells(uuid, a.Name, img, id, state, created, started, nets)
		} else {
			t.cells(uuid, a.Name, img, state, created, started, nets)
		}
		// The pod's columns describe the pod, not each app.
		uuid, state, nets, created, started = "", "", "", "", ""
	}
}

// flush writes out the aligned table.
func (t *table) flush() error {
	if t.err != nil {
		return t.err
	}
	return t.tw.Flush()
}

func tableTime(t time.Time, full bool, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	if full {
		return t.Format(timeLayout)
	}
	return relTime(t, now)
}
