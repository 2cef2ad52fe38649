package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// The logging measurement: one app writes logLines lines of logLineSize
// bytes to stdout, one write(2) each, as fast as it can, then sleeps.
// pod1 runs in a private mount namespace whose /run/systemd, /run/log and
// /var/log/journal are empty tmpfs, with or without a journald of the
// bench's own (volatile storage, no rate limit): whatever the host runs
// never sees the bench's lines, and the namespace without journald is a
// host without a journal (pod1 then writes its log files). The peer is
// rkt's own stage1 design: systemd-nspawn booting systemd and journald,
// the app a service whose stdout is the journal (or a file), with the same
// journald settings.
const (
	logLines    = 200000
	logLineSize = 60
)

// logNS is the private mount namespace, held by a sleeping process.
type logNS struct {
	holder, journald *child
	nsenter          string
}

func (b *bench) newLogNS(withJournald bool) (*logNS, error) {
	conf := filepath.Join(b.work, "journald.conf")
	if err := os.WriteFile(conf, []byte(benchJournaldConf), 0o644); err != nil {
		return nil, err
	}
	for _, d := range []string{"/run/systemd", "/run/log", "/var/log/journal"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	script := "set -e; for d in /run/systemd /run/log /var/log/journal; do mount -t tmpfs tmpfs $d; done; " +
		"mkdir -p /run/systemd/journal; "
	if _, err := os.Stat("/etc/systemd/journald.conf"); err == nil {
		script += "mount --bind " + conf + " /etc/systemd/journald.conf; "
	}
	script += "echo ready; exec sleep 1800"
	h, err := start(spec{argv: []string{b.tools["unshare"], "--mount", "--propagation=private", "--", "/bin/sh", "-c", script}})
	if err != nil {
		return nil, err
	}
	ns := &logNS{holder: h, nsenter: b.tools["nsenter"]}
	if err := h.waitOutput("ready", 20*time.Second); err != nil {
		ns.close()
		return nil, fmt.Errorf("log namespace: %w: %s", err, h.output(300))
	}
	if withJournald {
		if ns.journald, err = start(spec{argv: append(ns.enter("/"), "/lib/systemd/systemd-journald")}); err != nil {
			ns.close()
			return nil, err
		}
		sock := fmt.Sprintf("/proc/%d/root/run/systemd/journal/socket", h.pid)
		if err := waitUntil(10*time.Second, time.Millisecond, "journald's socket", func() bool {
			_, err := os.Stat(sock)
			return err == nil
		}); err != nil {
			ns.close()
			return nil, err
		}
	}
	return ns, nil
}

// benchJournaldConf is the journald of both sides: in memory, every line
// taken (no rate limit), nothing forwarded.
const benchJournaldConf = "[Journal]\nStorage=volatile\nRateLimitBurst=0\nForwardToSyslog=no\n" +
	"ForwardToWall=no\nForwardToConsole=no\nForwardToKMsg=no\nAudit=no\n"

// enter is the command prefix that runs a command in the namespace, in
// dir (entered after the namespace, so that it is the namespace's).
func (ns *logNS) enter(dir string) []string {
	return []string{ns.nsenter, "-t", strconv.Itoa(ns.holder.pid), "-m", "--", "env", "--chdir=" + dir}
}

func (ns *logNS) close() {
	for _, c := range []*child{ns.journald, ns.holder} {
		if c != nil {
			_ = unix.Kill(c.pid, unix.SIGKILL)
			_ = c.wait(10 * time.Second)
			c.close()
		}
	}
}

// appRate reads the "<lines> <ns>" file the probe writes after its
// burst, as lines per second.
func appRate(path string, timeout time.Duration) (float64, error) {
	var rate float64
	err := waitUntil(timeout, 5*time.Millisecond, "the app's burst", func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return false
		}
		n, _ := strconv.ParseFloat(f[0], 64)
		d, _ := strconv.ParseFloat(f[1], 64)
		rate = n / (d / 1e9)
		return d > 0
	})
	return rate, err
}

// vmStatus reads VmRSS and VmHWM (MiB) of a process.
func vmStatus(pid int) (rss, hwm float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = n / 1024
		case "VmHWM:":
			hwm = n / 1024
		}
	}
	return rss, hwm, nil
}

// measureLogs is issue 15's row: lines per second an app writes through
// pod1 to the journal and to its log files, beside nspawn + systemd +
// journald, and PID 1's memory with and without logging.
func (b *bench) measureLogs() []*section {
	rate := newSection("logs", "Logging: lines per second an app writes", "lines/s", "app's rate", "lines lost")
	rate.colUnits = []string{"lines/s", "%"}
	rate.ratioLabel = "pod1 ÷ nspawn, same sink"
	const sdJournal, sdFile = "systemd-nspawn + systemd + journald, to the journal", "systemd-nspawn + systemd, to a file"
	rate.desc = fmt.Sprintf("One app writes %d lines of %d bytes to stdout, one write(2) each, as fast as it can; "+
		"the rate is the app's own (lines over the time its writes took). pod1 never makes an app wait for a log sink: "+
		"what the journal cannot take in time is dropped and counted (`logDropped` in the app's record, read once the pod "+
		"has ended and drained); the console of `run` is /dev/null. nspawn + systemd: the app is a service whose stdout is "+
		"journald's stream socket (or a file), as in rkt's own stage1; journald there makes the app wait and loses "+
		"nothing. Both journalds keep entries in memory, without rate limit; pod1's is a private one of the bench's.",
		logLines, logLineSize)
	mem := newSection("logs-memory", "Logging: PID 1's memory with and without logging", "MiB", "RSS after", "peak RSS")
	mem.noRatio = true
	mem.desc = fmt.Sprintf("pod1's PID 1 (VmRSS and VmHWM from /proc/PID/status) once the app of the row above has "+
		"written its %d lines and sleeps, its output carried to the sink named; without logging the app's stdout and "+
		"stderr are /dev/null (rkt's `--stdout=null --stderr=null`), so PID 1 carries nothing.", logLines)
	var withJ, without *logNS
	defer func() {
		for _, ns := range []*logNS{withJ, without} {
			if ns != nil {
				ns.close()
			}
		}
	}()
	nsSetup := func(j bool) func() error {
		return func() error {
			if err := b.notInstalled("unshare", "nsenter"); err != nil {
				return err
			}
			if j {
				if _, err := os.Stat("/lib/systemd/systemd-journald"); err != nil {
					return fmt.Errorf("systemd-journald is not installed here")
				}
			}
			var err error
			ns := &without
			if j {
				ns = &withJ
			}
			if *ns == nil {
				*ns, err = b.newLogNS(j)
			}
			return err
		}
	}
	pod1Peer := func(name string, journal bool, ann map[string]string) *peer {
		return &peer{name: name, pod1: true, setup: nsSetup(journal), round: func(r *row) error {
			ns := without
			if journal {
				ns = withJ
			}
			return b.logRound(r, ns, mem.row(name, true), ann)
		}}
	}
	nspawnPeer := func(name, tree, extra string) *peer {
		var root string
		return &peer{name: name, setup: func() error {
			if err := b.notInstalled("systemd-nspawn"); err != nil {
				return err
			}
			var err error
			root, err = b.sdTree(tree, []string{"/probe", "lines", strconv.Itoa(logLines),
				strconv.Itoa(logLineSize), "/var/rate", "+", "sleep", "60s"}, extra)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(root, "etc/systemd"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(root, "etc/systemd/journald.conf"), []byte(benchJournaldConf), 0o644)
		}, round: func(r *row) error {
			_ = os.Remove(filepath.Join(root, "var/rate"))
			_ = os.Remove(filepath.Join(root, "var/app.log"))
			c, err := start(spec{argv: b.nspawnArgs(root, "--bind-ro=/usr", "--boot"), noOut: true})
			if err != nil {
				return err
			}
			defer c.close()
			defer stopChild(c, unix.SIGTERM)
			v, err := appRate(filepath.Join(root, "var/rate"), 120*time.Second)
			if err != nil {
				return err
			}
			r.m[0].add(v)
			r.m[1].add(0)
			return nil
		}}
	}
	peers := []*peer{
		pod1Peer("pod1, to the journal", true, nil),
		pod1Peer("pod1, to its log files (no journal)", false, nil),
		pod1Peer("pod1, no logging (stdout, stderr null)", false, map[string]string{
			"coreos.com/rkt/stage2/stdout": "null", "coreos.com/rkt/stage2/stderr": "null"}),
		nspawnPeer(sdJournal, "logs-journal", "StandardOutput=journal\n"),
		nspawnPeer(sdFile, "logs-file", "StandardOutput=append:/var/app.log\n"),
	}
	b.interleave(rate, peers, 3, 1)
	// Each pod1 row against nspawn writing to the same kind of sink;
	// the other rows get no ratio (no row has that name).
	for name, vs := range map[string]string{"pod1, to the journal": sdJournal, "pod1, to its log files (no journal)": sdFile,
		"pod1, no logging (stdout, stderr null)": "-", sdJournal: "-", sdFile: "-"} {
		rate.row(name, strings.HasPrefix(name, "pod1")).vs = vs
	}
	return []*section{rate, mem}
}

// logRound runs one pod1 round: the pod started in ns, the app's rate
// read after its burst, PID 1's memory then, the pod stopped and its
// dropped lines read from the app's record.
func (b *bench) logRound(r *row, ns *logNS, memRow *row, ann map[string]string) error {
	p, err := b.newPod([]podApp{{name: "app", ann: ann, exec: []string{"/probe", "lines", strconv.Itoa(logLines),
		strconv.Itoa(logLineSize), "/tmp/rate", "+", "sleep", "60s"}}})
	if err != nil {
		return err
	}
	defer func() {
		if err := b.finishPod(p); err != nil {
			b.logf("logs: %v", err)
		}
	}()
	lock, err := os.Open(p.dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	run := filepath.Join(p.dir, layout.Stage1RootFS, "run")
	c, err := start(spec{argv: append(ns.enter(p.dir), run, "--net=none", p.uuid), dir: p.dir,
		env: append(os.Environ(), "RKT_LOCK_FD=3"), files: []*os.File{lock}, sys: &syscall.SysProcAttr{}, noOut: true})
	if err != nil {
		return err
	}
	defer c.close()
	defer stopChild(c, unix.SIGTERM)
	v, err := appRate(filepath.Join(p.dir, layout.AppRootfs("app"), "tmp/rate"), 120*time.Second)
	if err != nil {
		return fmt.Errorf("%w: %s", err, c.output(300))
	}
	pid1, err := p.pid1(time.Second)
	if err != nil {
		return err
	}
	// What is queued is carried (or dropped) by now.
	time.Sleep(settle)
	rss, hwm, err := vmStatus(pid1)
	if err != nil {
		return err
	}
	stopChild(c, unix.SIGTERM)
	var rec struct {
		LogDropped uint64 `json:"logDropped"`
	}
	jb, err := os.ReadFile(filepath.Join(p.dir, layout.StatusDir, "app.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(jb, &rec); err != nil {
		return err
	}
	r.m[0].add(v)
	r.m[1].add(100 * float64(rec.LogDropped) / logLines)
	if !b.warming {
		memRow.m[0].add(rss)
		memRow.m[1].add(hwm)
	}
	return nil
}
