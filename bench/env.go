package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/hostside/launch"
)

// bench holds what every measurement shares.
type bench struct {
	repo       string
	work       string // scratch dir, removed at the end
	stage1Init string
	pod1Bin    string
	probe      string
	self       string
	fixture    string // the app rootfs every peer runs
	readyFifo  string
	rounds     int
	warmup     int
	// peers, if set, keeps only the interleaved peers whose row name
	// contains one of its comma-separated words (A/B runs of one row).
	peers string
	// vs are other pod1 trees whose stage1 start is measured in the same
	// rounds as ours, one row each (A/B runs of two builds).
	vs []string
	// warming is set while interleave runs a warm-up round.
	warming bool

	// tools found on the host, by name ("" if missing).
	tools map[string]string
	// versions of the peers, for the report.
	versions []string
	// notes for the report's preamble: what the bench changed on the host
	// for the run and put back.
	setupNotes []string
	// undo runs at the end, last in first out.
	undo []func() error
	// leftovers lists what some run left behind (cgroups, mounts).
	leftovers []string
	log       *os.File
	sections  []*section
	targets   []target
	// memDetail is the memory section's per-process figures of the last
	// round, by row.
	memDetail map[string]string
	// loads are the 1-minute load average as each measurement began.
	loads []string
	// steals are the share of CPU time the hypervisor took during each
	// measurement.
	steals  []string
	started time.Time
}

func (b *bench) logf(format string, a ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", a...)
}

func (b *bench) atExit(f func() error) { b.undo = append(b.undo, f) }

// cleanup undoes the setup, last first, and reports what it could not.
func (b *bench) cleanup() {
	for i := len(b.undo) - 1; i >= 0; i-- {
		if err := b.undo[i](); err != nil {
			b.logf("cleanup: %v", err)
			b.leftovers = append(b.leftovers, err.Error())
		}
	}
	b.undo = nil
}

// setup prepares the fixtures and the host.
func (b *bench) setup() error {
	var err error
	b.work, err = os.MkdirTemp("", "pod1-bench-")
	if err != nil {
		return err
	}
	b.atExit(func() error {
		// Whatever a failed round left mounted goes first.
		if err := launch.UnmountAll(b.work); err != nil {
			return err
		}
		return os.RemoveAll(b.work)
	})
	b.tools = map[string]string{}
	var missing []string
	for _, t := range []string{"crun", "runc", "systemd-nspawn", "tini", "catatonit", "conmon", "unshare", "chroot", "nsenter", "ip"} {
		if b.tools[t] = lookPath(t); b.tools[t] == "" {
			missing = append(missing, t)
		}
	}
	// bin/bench run by hand finds only what is installed (make bench
	// installs the peers): say up front which rows will be empty.
	if err := b.notInstalled(missing...); err != nil {
		b.logf("peers %v: their rows are skipped", err)
		b.setupNotes = append(b.setupNotes, fmt.Sprintf("**Peers %v**: their rows are skipped, with this reason.", err))
	}
	if err := b.makeFixture(); err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	if err := b.enterCgroup(); err != nil {
		return fmt.Errorf("bench cgroup: %w", err)
	}
	b.collectVersions()
	return nil
}

// makeFixture writes the app rootfs every peer runs: the tiny executables,
// the probe and the bench itself (for the in-pod helpers), the ready FIFO,
// an empty /usr (systemd-nspawn refuses a tree without one) and the usual
// mount points.
func (b *bench) makeFixture() error {
	b.fixture = filepath.Join(b.work, "rootfs")
	for _, d := range []string{"etc", "tmp", "usr", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(b.fixture, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(b.fixture, "tmp"), 0o1777); err != nil {
		return err
	}
	for name, code := range map[string][]byte{"true": codeTrue, "orphan": codeOrphan, "orphan-timed": codeOrphanTimed, "ready": codeReady} {
		if err := writeTiny(filepath.Join(b.fixture, name), code); err != nil {
			return err
		}
	}
	if err := copyFile(b.probe, filepath.Join(b.fixture, "probe")); err != nil {
		return err
	}
	if err := copyFile(b.self, filepath.Join(b.fixture, "bench")); err != nil {
		return err
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(b.fixture, n), []byte(c), 0o644); err != nil {
			return err
		}
	}
	// One FIFO, hard-linked into every app's root as /ready.fifo: every
	// app of the scale pod writes its byte into the same pipe.
	b.readyFifo = filepath.Join(b.fixture, "ready.fifo")
	return unix.Mkfifo(b.readyFifo, 0o666)
}

func copyFile(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func (b *bench) collectVersions() {
	add := func(name string, argv ...string) {
		if b.tools[name] == "" {
			b.versions = append(b.versions, name+": not installed")
			return
		}
		argv[0] = b.tools[name]
		out, _ := quiet(5*time.Second, argv...)
		first := strings.SplitN(strings.TrimSpace(out), "\n", 2)[0]
		b.versions = append(b.versions, fmt.Sprintf("%s: %s", name, first))
	}
	add("crun", "crun", "--version")
	add("runc", "runc", "--version")
	add("systemd-nspawn", "systemd-nspawn", "--version")
	add("tini", "tini", "--version")
	add("catatonit", "catatonit", "--version")
	add("conmon", "conmon", "--version")
	add("unshare", "unshare", "--version")
}

// machine describes the host for the report.
func machine() string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var si unix.Sysinfo_t
	_ = unix.Sysinfo(&si)
	osName := ""
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				osName = strings.Trim(v, `"`)
			}
		}
	}
	return fmt.Sprintf("%s, Linux %s, %d × %s, %.0f GiB RAM",
		osName, unix.ByteSliceToString(u.Release[:]), numCPU(), cpu,
		float64(si.Totalram)*float64(si.Unit)/(1<<30))
}

func numCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	return set.Count()
}

// cpuTimes returns the clock ticks all CPUs spent so far, and those the
// hypervisor took from this machine (steal), from /proc/stat's cpu line.
func cpuTimes() (total, steal uint64) {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i < 8 { // user nice system idle iowait irq softirq steal
			total += n
		}
		if i == 7 {
			steal = n
		}
	}
	return total, steal
}

// stealShare is the share of the CPU time between two cpuTimes readings
// that the hypervisor took, as a percentage.
func stealShare(t0, s0, t1, s1 uint64) string {
	if t1 <= t0 {
		return "?"
	}
	return strconv.FormatFloat(100*float64(s1-s0)/float64(t1-t0), 'f', 1, 64) + "%"
}

// loadavg is the 1-minute load average at the time of the call.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
