package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/status"
)

// What the apps send to /dev/log reaches the pod's log files, under the
// app whose socket it came in on, whatever tag it names, with the
// priority and tag of its header: RFC 3164 as glibc and logger send it,
// RFC 5424, and no header at all. pod1 logs reads them back.
func TestDevLogToLogFiles(t *testing.T) {
	ns := newLogNS(t, false)
	data := dataDir(t)
	p := runInNS(t, ns, data,
		[]string{"a", "syslog", "/dev/log", "2", "hello", "+", "syslog-raw", "/dev/log",
			`<30>1 2026-12-06T10:00:00.5Z host web 42 ID47 [x a="]" b="\"]"][y] five424`,
			"no header at all\n",
			"<165>Dec  6 10:00:00 cron[7]: ran\n",
			"<11>b: not b's",
			"<13>line one\nline two"},
		[]string{"b", "syslog", "/dev/log", "1", "from-b"})
	p.wait(t)
	if !strings.Contains(p.Stdout.String(), "syslog /dev/log sent 2 ok") || !strings.Contains(p.Stdout.String(), "syslog /dev/log sent 1 ok") {
		t.Fatalf("the apps could not send to /dev/log:\nstdout %s\nstderr %s", p.Stdout, p.Stderr)
	}
	out, errOut, code := pod1(t, data, "logs", p.UUID)
	if code != 0 {
		t.Fatalf("pod1 logs: %d %s", code, errOut)
	}
	for _, want := range []string{
		"a: user.notice tag: hello 0",
		"a: user.notice tag: hello 1",
		"a: daemon.info web[42]: five424",
		"a: user.info no header at all",
		"a: local4.notice cron[7]: ran",
		"a: user.err b: not b's",
		"a: user.notice line one",
		"a: user.notice line two",
		"b: user.notice tag: from-b 0",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("pod1 logs lacks %q:\n%s", want, out)
		}
	}
	if out, _, _ := pod1(t, data, "logs", "--app=b", p.UUID); !strings.Contains(out, "user.notice tag: from-b 0\n") || strings.Contains(out, "hello") {
		t.Errorf("pod1 logs --app=b: %q", out)
	}
	// The console gets the apps' output, not their syslog.
	if strings.Contains(p.Stdout.String()+p.Stderr.String(), "from-b 0") {
		t.Errorf("a syslog message reached the console:\n%s\n%s", p.Stdout, p.Stderr)
	}
}

// With a journal, each message is an entry of its own with the fields
// journald gives /dev/log's (PRIORITY, SYSLOG_FACILITY,
// SYSLOG_IDENTIFIER, SYSLOG_PID) and pod1's (POD1_APP, POD1_POD_UUID,
// POD1_STREAM=syslog).
func TestDevLogToJournal(t *testing.T) {
	ns := newLogNS(t, true)
	p := newPod(t, []App{
		{Name: "web", Exec: probe("syslog-raw", "/dev/log", "<27>Dec  6 10:00:00 nginx[9]: upstream gone", "bare")},
	}, nil)
	r := runPod(t, p, RunOpts{Wrapper: ns.wrapper(p)})
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var got []string
	for _, e := range ns.entries(t, p.UUID) {
		if e["POD1_STREAM"] != "syslog" {
			continue
		}
		got = append(got, fmt.Sprintf("%v %v %v %v %v %v", e["POD1_APP"], e["SYSLOG_IDENTIFIER"], e["SYSLOG_PID"], e["PRIORITY"], e["SYSLOG_FACILITY"], e["MESSAGE"]))
	}
	want := []string{"web nginx 9 3 3 upstream gone", "web web <nil> 6 1 bare"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("journal entries:\n%s\nwant:\n%s\n(stderr %s)", strings.Join(got, "\n"), strings.Join(want, "\n"), r.Stderr)
	}
}

// An app that floods /dev/log neither grows PID 1's memory nor starves a
// sibling's messages: past its rate its messages are dropped, counted in
// its record, and the count is logged.
func TestDevLogFloodIsBounded(t *testing.T) {
	ns := newLogNS(t, false)
	data := dataDir(t)
	p := runInNS(t, ns, data,
		[]string{"flood", "syslog-flood", "/dev/log", "4", "500"},
		[]string{"calm", "sleep", "500ms", "+", "syslog", "/dev/log", "40", "calm", "50"})
	pid := 0
	waitFor(t, 10*time.Second, "PID 1's pid", func() bool {
		b, err := os.ReadFile(filepath.Join(p.Dir, layout.Pid))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	rss := func() int {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				return n
			}
		}
		return 0
	}
	time.Sleep(300 * time.Millisecond)
	base, peak := rss(), 0
	for done := false; !done; {
		select {
		case <-p.done:
			done = true
		case <-time.After(50 * time.Millisecond):
			peak = max(peak, rss())
		}
	}
	t.Logf("PID 1's RSS: %d KiB, at most %d KiB during the flood", base, peak)
	if peak-base > 8<<10 {
		t.Errorf("PID 1 grew by %d KiB during the flood", peak-base)
	}
	sent := 0
	m := regexp.MustCompile(`syslog-flood sent (\d+) ok`).FindStringSubmatch(p.Stdout.String())
	if m != nil {
		sent, _ = strconv.Atoi(m[1])
	}
	if sent < 10000 {
		t.Fatalf("the flood sent %d messages:\n%s\n%s", sent, p.Stdout, p.Stderr)
	}
	out, _, _ := pod1(t, data, "logs", "--app=calm", p.UUID)
	for i := 0; i < 40; i++ {
		if !strings.Contains(out, fmt.Sprintf("user.notice tag: calm %d\n", i)) {
			t.Errorf("calm's message %d was lost:\n%s", i, out)
			break
		}
	}
	out, _, _ = pod1(t, data, "logs", "--app=flood", p.UUID)
	logged := strings.Count(out, "flood: ")
	rec, err := status.ReadRecord(filepath.Join(p.Dir, layout.StatusDir), "flood")
	must(t, err)
	t.Logf("the flood sent %d, %d logged, %d dropped", sent, logged, rec.SyslogDropped)
	if rec.SyslogDropped == 0 || int(rec.SyslogDropped)+logged != sent || logged > 2000+6000 {
		t.Errorf("the flood sent %d, %d logged, %d dropped", sent, logged, rec.SyslogDropped)
	}
	if !strings.Contains(out, "pod1: ") || !strings.Contains(out, " messages to /dev/log dropped: more than 1000 a second") {
		t.Errorf("no line says messages were dropped:\n%.2000s", out)
	}
}

// An app reaches its own /dev/log only: not another app's, through the
// path PID 1 made it at nor through that app's /proc/PID/root (for an app
// of another user, which the kernel's ptrace check keeps out of the
// other's root: docs/security.md).
func TestDevLogOutOfOtherAppsReach(t *testing.T) {
	ns := newLogNS(t, false)
	data := dataDir(t)
	p := runInNS(t, ns, data,
		[]string{"victim", "syslog", "/dev/log", "1", "from-victim", "+", "sleep", "3s", "+", "tag", "devlog-victim"},
		[]string{"other --user=1000 --group=1000", "sleep", "1s", "+", "syslog-others", "devlog-victim",
			"+", "syslog", "/" + layout.DevLogDirIn + "/victim/log", "1", "x",
			"+", "syslog", "/dev/log", "1", "from-other"})
	p.wait(t)
	out := p.Stdout.String()
	t.Logf("stdout %s\nstderr %s", out, p.Stderr)
	if !strings.Contains(out, "syslog-others ") || strings.Contains(out, "syslog-others ok") {
		t.Errorf("another app's /dev/log reached, or not tried:\n%s", out)
	}
	if !strings.Contains(out, "syslog /"+layout.DevLogDirIn+"/victim/log sent 0 ENOENT") {
		t.Errorf("the sockets' directory is in an app's root:\n%s", out)
	}
	logs, _, _ := pod1(t, data, "logs", p.UUID)
	for _, want := range []string{"victim: user.notice tag: from-victim 0\n", "other: user.notice tag: from-other 0\n"} {
		if !strings.Contains(logs, want) {
			t.Errorf("pod1 logs lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "intruder") {
		t.Errorf("a message reached another app's log:\n%s", logs)
	}
}
