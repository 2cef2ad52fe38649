package podlog

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSyslog(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"<13>Dec  6 10:00:00 tag: hello", "13 tag - hello"},
		{"<13>Dec  6 10:00:00 tag[42]: hello\n", "13 tag 42 hello"},
		{"<13>tag: hello\x00", "13 tag - hello"},
		{"<165>2026-12-06T10:00:00.123+01:00 cron[7]: ran", "165 cron 7 ran"},
		{"hello world", "14 - - hello world"},
		{"<13>hello world", "13 - - hello world"},
		{"<13>host tag: text", "13 - - host tag: text"},
		{"<192>x: y", "14 - - <192>x: y"},
		{"<1234>x: y", "14 - - <1234>x: y"},
		{"<>x: y", "14 - - <>x: y"},
		{"<0>kernel: panic", "0 kernel - panic"},
		{"<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - BOM'su root' failed", "34 su - BOM'su root' failed"},
		{"<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time", "165 myproc 8710 %% It's time"},
		{`<165>1 2003-10-11T22:14:15.003Z host evntslog - ID47 [exampleSDID@32473 iut="3" x="a\]b" y="]"][z] text`, "165 evntslog - text"},
		{"<165>1 - - - - - -", "165 - - "},
		{`<165>1 - - app - - [x a="]`, `165 - - 1 - - app - - [x a="]`},
		{"<165>1 - - app - - -\xef\xbb\xbfbom", "165 app - bom"},
		// Not 5424 after all: the structured data is neither '-' nor '['.
		{"<13>1 a b c d e f g", "13 - - 1 a b c d e f g"},
		{"<13>tag[notapid with blank]: x", "13 - - tag[notapid with blank]: x"},
		{"<13>tag[1]no colon", "13 - - tag[1]no colon"},
		{"<13>" + strings.Repeat("t", 65) + ": x", "13 - - " + strings.Repeat("t", 65) + ": x"},
		{"<13>tag\x1b[31m: x", "13 - - tag\x1b[31m: x"},
		{"", "14 - - "},
	} {
		m := ParseSyslog([]byte(c.in))
		id, pid := m.Ident, m.Pid
		if id == "" {
			id = "-"
		}
		if pid == "" {
			pid = "-"
		}
		if got := fmt.Sprintf("%d %s %s %s", m.Priority, id, pid, m.Msg); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSyslogPrefix(t *testing.T) {
	for _, c := range []struct {
		m    SyslogMsg
		want string
	}{
		{SyslogMsg{Priority: 13, Ident: "tag"}, "user.notice tag: "},
		{SyslogMsg{Priority: 3<<3 | 3, Ident: "cron", Pid: "7"}, "daemon.err cron[7]: "},
		{SyslogMsg{Priority: 23<<3 | 7}, "local7.debug "},
	} {
		if got := string(c.m.appendPrefix(nil)); got != c.want {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
}

// The rate limit lets a burst through, then the rate, and counts what it
// refuses.
func TestSyslogRate(t *testing.T) {
	sk := &syslogSock{tokens: syslogBurst}
	now := sk.last
	n := 0
	for i := 0; i < 3*syslogBurst; i++ {
		if sk.take(now) {
			n++
		}
	}
	if n != syslogBurst || sk.suppressed != 2*syslogBurst {
		t.Fatalf("a burst took %d, suppressed %d", n, sk.suppressed)
	}
	now = now.Add(100 * 1e6)
	n = 0
	for i := 0; i < syslogRate; i++ {
		if sk.take(now) {
			n++
		}
	}
	if n != syslogRate/10 {
		t.Fatalf("after 100 ms, %d taken, want %d", n, syslogRate/10)
	}
}

// An app's /dev/log, served from before its first stream, costs the
// stream nothing: its CRI file is still made, and a message sent to the
// socket reaches the app's log file in order with its output.
func TestSyslogBeforeStreams(t *testing.T) {
	dir, dfd := openDir(t)
	cdir, cfd := openDir(t)
	sdir := t.TempDir()
	f := New("u", false, dfd, cfd)
	f.SetConsole(-1, -1)
	p, err := f.ListenSyslog("web", sdir, "/seen")
	if err != nil {
		t.Fatal(err)
	}
	if p != "/seen/web/log" {
		t.Errorf("path %q", p)
	}
	c, err := net.Dial("unixgram", filepath.Join(sdir, "web", SocketName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("<11>tag[3]: broken\n")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitLines(t, filepath.Join(dir, FileName("web")), 1)
	write(t, f, "web", Stdout, "web_0.log", "out\n")
	if _, err := os.Stat(filepath.Join(sdir, "web")); err != nil {
		t.Errorf("the socket's directory is gone before the app is: %v", err)
	}
	f.EndSyslog("web")
	if _, err := os.Stat(filepath.Join(sdir, "web")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket's directory is left after EndSyslog: %v", err)
	}
	f.Close(time.Second)
	for file, want := range map[string][]string{
		filepath.Join(dir, FileName("web")): {" stderr F user.err tag[3]: broken", " stdout F out"},
		filepath.Join(cdir, "web_0.log"):    {" stdout out"},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(got) != len(want) {
			t.Fatalf("%s: %q", file, b)
		}
		for i := range want {
			if !strings.HasSuffix(got[i], want[i]) {
				t.Errorf("%s: line %d %q, want ...%q", file, i, got[i], want[i])
			}
		}
	}
}

func waitLines(t *testing.T, file string, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(file); strings.Count(string(b), "\n") >= n {
			return
		}
	}
	t.Fatalf("%s: fewer than %d lines", file, n)
}
