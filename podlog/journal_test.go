package podlog

import (
	"encoding/binary"
	"strings"
	"testing"
)

// Lines go together only while the journal is behind, only lines of one
// stream of one app, in order, within the caps.
func TestEntryLines(t *testing.T) {
	a, b := &appLog{name: "a"}, &appLog{name: "b"}
	out, errs := journalHeader(Stdout, map[string]string{"SYSLOG_IDENTIFIER": "a"}), journalHeader(Stderr, map[string]string{"SYSLOG_IDENTIFIER": "a"})
	mk := func(app *appLog, hdr []byte, n int, msg string) []journalEntry {
		es := make([]journalEntry, n)
		for i := range es {
			es[i] = journalEntry{msg: msg, hdr: hdr, app: app}
		}
		return es
	}
	es := append(append(append(mk(a, out, 3, "x"), mk(a, errs, 2, "y")...), mk(b, out, 1, "z")...), mk(a, out, 300, "w")...)
	j := &journalQueue{}
	j.n = journalBehind
	if k := j.entryLines(es); k != 1 {
		t.Errorf("not behind: %d lines in one entry", k)
	}
	j.n = journalBehind + 1
	for _, c := range []struct{ from, want int }{{0, 3}, {3, 2}, {5, 1}, {6, journalEntryLines}} {
		if k := j.entryLines(es[c.from:]); k != c.want {
			t.Errorf("from %d: %d lines in one entry, want %d", c.from, k, c.want)
		}
	}
	big := mk(a, out, 5, strings.Repeat("v", journalEntryBytes/3+1))
	if k := j.entryLines(big); k != 2 {
		t.Errorf("%d lines of just over a third of the byte cap in one entry, want 2", k)
	}
}

// A value with a newline is written in the protocol's binary form.
func TestJournalField(t *testing.T) {
	if got := string(appendJournalField(nil, "A", "b=c")); got != "A=b=c\n" {
		t.Errorf("plain field %q", got)
	}
	got := appendJournalField(nil, "A", "x\ny")
	want := append(binary.LittleEndian.AppendUint64([]byte("A\n"), 3), "x\ny\n"...)
	if string(got) != string(want) {
		t.Errorf("binary field %q, want %q", got, want)
	}
}
