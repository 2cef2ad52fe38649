// Command probe is the static test app dropped into every test image. Its
// subcommands exercise and report what an app sees; several can be chained
// with "+" (probe fds + exit 3). Every report line starts with the
// subcommand's name, so tests can pick lines out of the pod's output.
//
// The Go runtime would size GOMAXPROCS from the app's cgroup, which an
// app sees at /sys/fs/cgroup, and keep its cpu files open to follow
// changes: fds of its own that the fd tests would count as leaked.
//
//go:debug containermaxprocs=0
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if planted() {
		return
	}
	args := os.Args[1:]
	for len(args) > 0 {
		i := indexOf(args, "+")
		cmd := args
		if i >= 0 {
			cmd, args = args[:i], args[i+1:]
		} else {
			args = nil
		}
		if len(cmd) == 0 {
			continue
		}
		if err := run(cmd[0], cmd[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "probe %s: %v\n", cmd[0], err)
			os.Exit(99)
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func arg(a []string, i int) string {
	if i < len(a) {
		return a[i]
	}
	return ""
}

func run(cmd string, a []string) error {
	switch cmd {
	case "exit":
		code, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return err
		}
		os.Exit(code)
	case "kill-self":
		n, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return err
		}
		// Go catches and ignores some signals (SIGUSR1): restore the
		// default action in the kernel itself.
		var act [4]uint64
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(n), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
		_ = unix.Tgkill(os.Getpid(), unix.Gettid(), unix.Signal(n))
		time.Sleep(10 * time.Second)
		return fmt.Errorf("still alive after signal %d", n)
	case "sleep":
		d, err := time.ParseDuration(arg(a, 0))
		if err != nil {
			return err
		}
		time.Sleep(d)
	case "term-exit":
		// Handle SIGTERM by exiting with the given code.
		code, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return err
		}
		c := make(chan os.Signal, 1)
		signal.Notify(c, unix.SIGTERM)
		go func() { <-c; os.Exit(code) }()
		fmt.Println("term-exit ready")
	case "ignore-term":
		signal.Ignore(unix.SIGTERM)
		fmt.Println("ignore-term ready")
	case "report-term":
		// Catch SIGTERM, say so, and go on: a stop the test can see
		// arrive without it ending the app.
		c := make(chan os.Signal, 1)
		signal.Notify(c, unix.SIGTERM)
		go func() {
			for range c {
				fmt.Println("term received")
			}
		}()
		fmt.Println("report-term ready")
	case "wait-file":
		for {
			if _, err := os.Stat(arg(a, 0)); err == nil {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
	case "wait-fifo":
		// Blocks until a writer opens the FIFO: a barrier that
		// releases every waiter at once without polling.
		f, err := os.OpenFile(arg(a, 0), os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		f.Close()
	case "touch":
		return os.WriteFile(arg(a, 0), nil, 0o644)
	case "fill":
		// Writes until the file system is full (ENOSPC).
		f, err := os.OpenFile(arg(a, 0), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		buf := make([]byte, 64<<10)
		for {
			if _, err := f.Write(buf); errors.Is(err, unix.ENOSPC) {
				fmt.Println("fill full")
				return nil
			} else if err != nil {
				return err
			}
		}
	case "write":
		return os.WriteFile(arg(a, 0), []byte(arg(a, 1)), 0o644)
	case "cat":
		b, err := os.ReadFile(arg(a, 0))
		if err != nil {
			return err
		}
		fmt.Printf("cat %s\n", strings.ReplaceAll(strings.TrimRight(string(b), "\n"), "\n", "\ncat "))
	case "append":
		// One line per call, with the time: tests count runs and
		// measure the spacing of restarts.
		f, err := os.OpenFile(arg(a, 0), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "%d\n", time.Now().UnixNano())
		return err
	case "spy":
		return spy(a)
	case "write-all":
		return writeAll(arg(a, 0))
	case "freeze-pod":
		return freezePod()
	case "procs":
		// Live processes this app can see in the pod.
		n, err := liveProcs()
		if err != nil {
			return err
		}
		fmt.Printf("procs %d\n", n)
	case "connect":
		// Talks to a pod's control socket as an app would, and reports
		// the answer.
		c, err := net.Dial("unix", arg(a, 0))
		if err != nil {
			fmt.Printf("connect error %v\n", err)
			return nil
		}
		defer c.Close()
		_, _ = c.Write([]byte(`{"op":"stop","app":"x"}` + "\n"))
		b := make([]byte, 4096)
		n, _ := c.Read(b)
		if strings.Contains(string(b[:n]), "is inside the pod") {
			fmt.Printf("connect refused: %s\n", strings.TrimSpace(string(b[:n])))
		} else {
			fmt.Printf("connect answered: %s\n", strings.TrimSpace(string(b[:n])))
		}
	case "signal":
		return sendSignals(a)
	case "sigqueue":
		return queueSignals(a)
	case "forkbomb":
		return forkbomb()
	case "oom-hold":
		return oomHold(arg(a, 0))
	case "eat":
		eat()
	case "orphans":
		return orphans(a)
	case "spawn":
		return spawn(a)
	case "sock-serve":
		return sockServe(a)
	default:
		if ok, err := stdio(cmd, a); ok {
			return err
		}
		if ok, err := syslogProbe(cmd, a); ok {
			return err
		}
		if ok, err := attachClient(cmd, a); ok {
			return err
		}
		if ok, err := console(cmd, a); ok {
			return err
		}
		return report(cmd, a)
	}
	return nil
}

// orphans starts one child that starts N grandchildren and exits at once,
// so the N grandchildren are orphaned onto the pod's PID 1.
func orphans(a []string) error {
	n, err := strconv.Atoi(arg(a, 0))
	if err != nil {
		return err
	}
	p, err := os.StartProcess("/proc/self/exe", []string{"probe", "spawn", strconv.Itoa(n), arg(a, 1)}, &os.ProcAttr{
		Files: []*os.File{nil, os.Stdout, os.Stderr},
	})
	if err != nil {
		return err
	}
	st, err := p.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		return fmt.Errorf("spawner: %v", st)
	}
	fmt.Printf("orphans %d\n", n)
	return nil
}

func spawn(a []string) error {
	n, err := strconv.Atoi(arg(a, 0))
	if err != nil {
		return err
	}
	life := arg(a, 1)
	if life == "" {
		life = "0s"
	}
	for i := 0; i < n; i++ {
		p, err := os.StartProcess("/proc/self/exe", []string{"probe", "sleep", life}, &os.ProcAttr{})
		if err != nil {
			return err
		}
		_ = p.Release()
	}
	return nil
}

func report(cmd string, a []string) error {
	switch cmd {
	case "fds":
		fds, err := openFds()
		if err != nil {
			return err
		}
		fmt.Printf("fds %s\n", strings.Trim(fmt.Sprint(fds), "[]"))
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, kv := range env {
			fmt.Printf("env %q\n", kv)
		}
	case "ids":
		// The real, effective and saved ids must all be the app's: a
		// stage1 that set the real id but left the effective one
		// root fails here (execve itself resets the saved id to the
		// effective one).
		ru, eu, su := unix.Getresuid()
		rg, eg, sg := unix.Getresgid()
		if eu != ru || su != ru || eg != rg || sg != rg {
			return fmt.Errorf("ids differ: uid %d/%d/%d gid %d/%d/%d (real/effective/saved)", ru, eu, su, rg, eg, sg)
		}
		groups, _ := unix.Getgroups()
		sort.Ints(groups)
		fmt.Printf("ids uid=%d gid=%d groups=%v\n", os.Getuid(), os.Getgid(), groups)
	case "cwd":
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		fmt.Printf("cwd %s\n", wd)
	case "hostname":
		h, err := os.Hostname()
		if err != nil {
			return err
		}
		fmt.Printf("hostname %s\n", h)
	case "pid":
		fmt.Printf("pid %d ppid %d\n", os.Getpid(), os.Getppid())
	case "status":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			for _, k := range []string{"Cap", "NoNewPrivs", "Seccomp:", "Sig"} {
				if strings.HasPrefix(l, k) {
					fmt.Printf("status %s\n", strings.Join(strings.Fields(l), " "))
				}
			}
		}
	case "status-of":
		// Another process's capability sets and no_new_privs:
		// "status-of PID CapEff HEX", "status-of PID NoNewPrivs 1".
		b, err := os.ReadFile("/proc/" + arg(a, 0) + "/status")
		if err != nil {
			fmt.Printf("status-of %s error %v\n", arg(a, 0), err)
			return nil
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && (strings.HasPrefix(f[0], "Cap") || f[0] == "NoNewPrivs:") {
				fmt.Printf("status-of %s %s %s\n", arg(a, 0), strings.TrimSuffix(f[0], ":"), f[1])
			}
		}
	case "stat":
		var st unix.Stat_t
		if err := unix.Lstat(arg(a, 0), &st); err != nil {
			fmt.Printf("stat %s error %v\n", arg(a, 0), err)
			return nil
		}
		fmt.Printf("stat %s mode=%o rdev=%d:%d\n", arg(a, 0), st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case "owner":
		var st unix.Stat_t
		if err := unix.Lstat(arg(a, 0), &st); err != nil {
			fmt.Printf("owner %s error %v\n", arg(a, 0), err)
			return nil
		}
		fmt.Printf("owner %s uid=%d gid=%d\n", arg(a, 0), st.Uid, st.Gid)
	case "listen":
		l, err := net.Listen("tcp", arg(a, 0))
		if err != nil {
			fmt.Printf("listen %s error %v\n", arg(a, 0), err)
			return nil
		}
		l.Close()
		fmt.Printf("listen %s ok\n", arg(a, 0))
	case "tag":
		// Names the app in its command line, which every app can read.
	case "mkdir":
		err := os.Mkdir(arg(a, 0), 0o755)
		fmt.Printf("mkdir %s %s\n", arg(a, 0), errnoOf(err))
	case "fdlinks":
		return fdLinks(arg(a, 0))
	case "peer-roots":
		return peerRoots(arg(a, 0))
	case "in-pid1-pod":
		return inPID1Pod(arg(a, 0), arg(a, 1), arg(a, 2))
	case "plant-proc":
		return plantProc()
	case "ls":
		ents, err := os.ReadDir(arg(a, 0))
		if err != nil {
			fmt.Printf("ls %s error %v\n", arg(a, 0), err)
			return nil
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		fmt.Printf("ls %s %s\n", arg(a, 0), strings.Join(names, " "))
	case "mounts":
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(l)
			i := indexOf(f, "-")
			fmt.Printf("mounts %s %s %s %s\n", f[4], f[i+1], f[5], f[i+3])
		}
	case "ns":
		for _, n := range []string{"ipc", "mnt", "net", "pid", "uts"} {
			l, err := os.Readlink("/proc/self/ns/" + n)
			if err != nil {
				return err
			}
			fmt.Printf("ns %s %s\n", n, l)
		}
	case "serve":
		return serve(arg(a, 0), arg(a, 1))
	case "dial":
		dial(arg(a, 0), arg(a, 1))
	case "addrs":
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifc := range ifs {
			as, _ := ifc.Addrs()
			for _, ad := range as {
				if ipn, ok := ad.(*net.IPNet); ok && ipn.IP.To4() != nil {
					fmt.Printf("addrs %s %s\n", ifc.Name, ipn)
				}
			}
		}
	case "netdevs":
		ents, _ := os.ReadDir("/sys/class/net")
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		fmt.Printf("netdevs %s\n", strings.Join(names, " "))
	default:
		return isolation(cmd, a)
	}
	return nil
}

// openFds lists the open fds with raw syscalls, so that nothing the Go
// runtime might open for an *os.File (an epoll instance) shows up, and
// leaves out the directory fd used for the listing.
func openFds() ([]int, error) {
	dfd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(dfd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	var fds []int
	for _, name := range names {
		if n, err := strconv.Atoi(name); err == nil && n != dfd {
			fds = append(fds, n)
		}
	}
	sort.Ints(fds)
	return fds, nil
}

func liveProcs() (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "Z" {
			n++
		}
	}
	return n, nil
}

// forkbomb starts sleeping children until the kernel refuses, then reports
// how far it got and keeps them.
// oomHold tries to keep its app's cgroup out of the OOM killer's reach
// while it fills it: it makes itself unkillable by it (oom_score_adj
// -1000, which CAP_SYS_RESOURCE allows), then starts n children, which
// inherit that, each eating memory until the app's limit holds them all
// in the kernel's charge path. It reports "oom-hold started ADJ" first.
func oomHold(n string) error {
	adj := "ok"
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0); err != nil {
		adj = errnoOf(err)
	}
	count, err := strconv.Atoi(n)
	if err != nil {
		return err
	}
	fmt.Printf("oom-hold started %s\n", adj)
	for range count {
		p, err := os.StartProcess("/proc/self/exe", []string{"probe", "eat"}, &os.ProcAttr{})
		if err != nil {
			return err
		}
		_ = p.Release()
	}
	eat()
	return nil
}

// eaten keeps what eat allocated reachable, so that none of it is freed.
var eaten [][]byte

// eat allocates and touches memory, a MiB at a time, forever.
func eat() {
	for {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		eaten = append(eaten, b)
	}
}

func forkbomb() error {
	n := 0
	for ; n < 100000; n++ {
		p, err := os.StartProcess("/proc/self/exe", []string{"probe", "sleep", "600s"}, &os.ProcAttr{})
		if err != nil {
			fmt.Printf("forkbomb stopped after %d: %v\n", n, err)
			time.Sleep(600 * time.Second)
			return nil
		}
		_ = p.Release()
	}
	return fmt.Errorf("forkbomb was never stopped")
}

// sendSignals sends each signal of a comma-separated list to a pid, one at
// a time, and returns once the target has none of them pending: each was
// delivered and handled, or dropped.
func sendSignals(a []string) error {
	pid, err := strconv.Atoi(arg(a, 0))
	if err != nil {
		return err
	}
	for _, f := range strings.Split(arg(a, 1), ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return err
		}
		if err := unix.Kill(pid, unix.Signal(n)); err != nil {
			return fmt.Errorf("kill %d %d: %w", pid, n, err)
		}
		if err := waitNotPending(pid); err != nil {
			return fmt.Errorf("signal %d: %w", n, err)
		}
	}
	fmt.Printf("signal %d sent %s\n", pid, arg(a, 1))
	return nil
}

// waitNotPending waits until the process has no signal pending (the
// shared queue and its threads' own).
func waitNotPending(pid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return err
		}
		pending := false
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && (k == "ShdPnd" || k == "SigPnd") && strings.Trim(strings.TrimSpace(v), "0") != "" {
				pending = true
			}
		}
		if !pending {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still pending after 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// serve listens on addr (TCP), says so, and answers n clients (1 if not
// given) with "pong <what the client sent>", then returns. A connection
// closed before it sent anything is not counted.
func serve(addr, count string) error {
	n := 1
	if count != "" {
		var err error
		if n, err = strconv.Atoi(count); err != nil {
			return err
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Printf("serve %s error %v\n", addr, err)
		return nil
	}
	defer l.Close()
	fmt.Printf("serve %s ready\n", addr)
	// Only a connection that says something counts: a client whose
	// dial timed out after the kernel had completed the handshake
	// (a slow VM) closes without a word and retries, and that retry
	// must still find us listening.
	for served := 0; served < n; {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 256)
		m, _ := c.Read(b)
		if m == 0 {
			c.Close()
			continue
		}
		_, _ = c.Write([]byte("pong " + strings.TrimSpace(string(b[:m])) + "\n"))
		fmt.Printf("serve %s from %s\n", addr, c.RemoteAddr().(*net.TCPAddr).IP)
		c.Close()
		served++
	}
	return nil
}

// dial connects to addr (TCP) within 3 s, sends msg and reports the reply.
func dial(addr, msg string) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		fmt.Printf("dial %s error %v\n", addr, err)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte(msg + "\n"))
	b := make([]byte, 256)
	m, err := c.Read(b)
	if err != nil {
		fmt.Printf("dial %s error %v\n", addr, err)
		return
	}
	fmt.Printf("dial %s reply %s\n", addr, strings.TrimSpace(string(b[:m])))
}

// queueSignals queues each signal of a comma-separated list to a pid with
// rt_sigqueueinfo and a SI_QUEUE siginfo, as sigqueue(3) does, and
// reports each result; then waits until none is pending.
func queueSignals(a []string) error {
	pid, err := strconv.Atoi(arg(a, 0))
	if err != nil {
		return err
	}
	for _, f := range strings.Split(arg(a, 1), ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return err
		}
		var info [128]byte
		*(*int32)(unsafe.Pointer(&info[0])) = int32(n)
		*(*int32)(unsafe.Pointer(&info[8])) = -1 // SI_QUEUE
		_, _, e := unix.RawSyscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(pid), uintptr(n), uintptr(unsafe.Pointer(&info[0])))
		if e != 0 {
			fmt.Printf("sigqueue %d %d error %v\n", pid, n, e)
		} else {
			fmt.Printf("sigqueue %d %d ok\n", pid, n)
		}
		if err := waitNotPending(pid); err != nil {
			return fmt.Errorf("signal %d: %w", n, err)
		}
	}
	return nil
}
