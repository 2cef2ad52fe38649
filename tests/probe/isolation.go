package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// syscalls are the calls the isolation tests make raw, by name.
var syscalls = map[string]uintptr{
	"unshare": unix.SYS_UNSHARE, "mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2,
	"sysinfo": unix.SYS_SYSINFO, "getpid": unix.SYS_GETPID, "clone3": unix.SYS_CLONE3,
	"io_uring_setup": unix.SYS_IO_URING_SETUP, "keyctl": unix.SYS_KEYCTL,
	"open_tree": unix.SYS_OPEN_TREE, "ptrace": unix.SYS_PTRACE, "bpf": unix.SYS_BPF,
	"socket": unix.SYS_SOCKET, "statx": unix.SYS_STATX, "getcpu": unix.SYS_GETCPU,
}

// errnoOf names a syscall result: "ok" or the errno's name.
func errnoOf(err error) string {
	var e unix.Errno
	if err == nil {
		return "ok"
	}
	if errors.As(err, &e) {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	return err.Error()
}

func isolation(cmd string, a []string) error {
	switch cmd {
	case "syscall":
		// syscall NAME [ARG...]: a raw call with integer arguments.
		nr, ok := syscalls[arg(a, 0)]
		if !ok {
			return fmt.Errorf("unknown syscall %q", arg(a, 0))
		}
		var args [6]uintptr
		for i := 1; i < len(a) && i <= 6; i++ {
			v, err := strconv.ParseUint(a[i], 0, 64)
			if err != nil {
				return err
			}
			args[i-1] = uintptr(v)
		}
		_, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		fmt.Printf("syscall %s %s\n", arg(a, 0), errnoOf(e))
	case "clone-ns":
		// A child in a new namespace of the kind named (user, net...).
		flags := map[string]uintptr{"user": unix.CLONE_NEWUSER, "net": unix.CLONE_NEWNET, "ns": unix.CLONE_NEWNS}[arg(a, 0)]
		pid, err := syscall.ForkExec("/proc/self/exe", []string{"probe", "exit", "0"}, &syscall.ProcAttr{
			Sys: &syscall.SysProcAttr{Cloneflags: flags},
		})
		if err == nil {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
		fmt.Printf("clone-ns %s %s\n", arg(a, 0), errnoOf(err))
	case "open-write":
		fd, err := unix.Open(arg(a, 0), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		fmt.Printf("open-write %s %s\n", arg(a, 0), errnoOf(err))
	case "open-read":
		fd, err := unix.Open(arg(a, 0), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		fmt.Printf("open-read %s %s\n", arg(a, 0), errnoOf(err))
	case "readlink":
		t, err := os.Readlink(arg(a, 0))
		if err != nil {
			fmt.Printf("readlink %s %s\n", arg(a, 0), errnoOf(err))
		} else {
			fmt.Printf("readlink %s -> %s\n", arg(a, 0), t)
		}
	case "ptrace-attach":
		pid, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return err
		}
		err = unix.PtraceAttach(pid)
		if err == nil {
			_ = unix.PtraceDetach(pid)
		}
		fmt.Printf("ptrace-attach %d %s\n", pid, errnoOf(err))
	case "chown":
		uid, err := strconv.Atoi(arg(a, 1))
		if err != nil {
			return err
		}
		fmt.Printf("chown %s %s\n", arg(a, 0), errnoOf(unix.Chown(arg(a, 0), uid, uid)))
	case "hog":
		return hog(arg(a, 0))
	case "burn":
		return burn(arg(a, 0))
	case "burn-cpu":
		return burnCPU(arg(a, 0))
	case "swap":
		// swap PATH TARGET: PATH becomes a symlink to TARGET.
		if err := os.Rename(arg(a, 0), arg(a, 0)+".old"); err != nil {
			return err
		}
		if err := os.Symlink(arg(a, 1), arg(a, 0)); err != nil {
			return err
		}
		fmt.Println("swap done")
	case "rlimit":
		var l unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
			return err
		}
		fmt.Printf("rlimit nofile %d %d\n", l.Cur, l.Max)
	case "bench-getpid":
		n, err := strconv.Atoi(arg(a, 0))
		if err != nil {
			return err
		}
		t0 := time.Now()
		for i := 0; i < n; i++ {
			_, _, _ = unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
		}
		fmt.Printf("bench-getpid %.1f ns/op\n", float64(time.Since(t0).Nanoseconds())/float64(n))
	case "pwn-exe":
		return pwnExe(arg(a, 0))
	case "mknod":
		// mknod b|c MAJOR MINOR PATH
		major, err1 := strconv.ParseUint(arg(a, 1), 10, 32)
		minor, err2 := strconv.ParseUint(arg(a, 2), 10, 32)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("mknod: bad numbers %q %q", arg(a, 1), arg(a, 2))
		}
		mode := uint32(unix.S_IFCHR)
		if arg(a, 0) == "b" {
			mode = unix.S_IFBLK
		}
		err := unix.Mknod(arg(a, 3), mode|0o600, int(unix.Mkdev(uint32(major), uint32(minor))))
		fmt.Printf("mknod %s %s\n", arg(a, 3), errnoOf(err))
	case "statfs":
		// The size of the file system at PATH, in bytes.
		var st unix.Statfs_t
		if err := unix.Statfs(arg(a, 0), &st); err != nil {
			fmt.Printf("statfs %s %s\n", arg(a, 0), errnoOf(err))
			return nil
		}
		fmt.Printf("statfs %s size=%d\n", arg(a, 0), uint64(st.Blocks)*uint64(st.Bsize))
	case "fstype":
		// The type of the file system at PATH: cgroup2, tmpfs, or its
		// magic number.
		var st unix.Statfs_t
		if err := unix.Statfs(arg(a, 0), &st); err != nil {
			fmt.Printf("fstype %s %s\n", arg(a, 0), errnoOf(err))
			return nil
		}
		name := map[int64]string{unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.TMPFS_MAGIC: "tmpfs", unix.CGROUP_SUPER_MAGIC: "cgroup"}[int64(st.Type)]
		if name == "" {
			name = fmt.Sprintf("%#x", st.Type)
		}
		fmt.Printf("fstype %s %s\n", arg(a, 0), name)
	case "rw":
		// Opens PATH for reading and writing, writes a byte and reads
		// four: through a device node, what the device does with them.
		fd, err := unix.Open(arg(a, 0), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			fmt.Printf("rw %s open %s\n", arg(a, 0), errnoOf(err))
			return nil
		}
		defer unix.Close(fd)
		_, werr := unix.Write(fd, []byte{'x'})
		b := make([]byte, 4)
		n, rerr := unix.Read(fd, b)
		if rerr != nil {
			n = 0
		}
		fmt.Printf("rw %s write %s read %s %x\n", arg(a, 0), errnoOf(werr), errnoOf(rerr), b[:n])
	case "open-rw":
		fd, err := unix.Open(arg(a, 0), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err == nil {
			unix.Close(fd)
		}
		fmt.Printf("open-rw %s %s\n", arg(a, 0), errnoOf(err))
	default:
		return fmt.Errorf("unknown subcommand %q", cmd)
	}
	return nil
}

// pwnExe is CVE-2019-5736's attacker: for a while it opens for writing the
// executable of every process it can see whose binary is the stage1's,
// directly and (at the end) through O_PATH handles kept from the loop,
// looks where those processes stand (cwd), and reports what the kernel
// answered.
func pwnExe(d string) error {
	dur, err := time.ParseDuration(d)
	if err != nil {
		return err
	}
	answers := map[string]int{}
	seen := map[string]bool{}
	var kept []int
	for t0 := time.Now(); time.Since(t0) < dur; {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(os.Getpid()) {
				continue
			}
			exe := "/proc/" + e.Name() + "/exe"
			t, err := os.Readlink(exe)
			if errors.Is(err, unix.EACCES) {
				answers["hidden"]++
			}
			// The stage1 runs from a detached read-only mount of its
			// binary alone, whose path is "/".
			if err != nil || !strings.HasSuffix(t, "stage1-init") && t != "/" {
				continue
			}
			seen[e.Name()] = true
			// A stage1 process still setting an app up has the host's
			// root and cwd (CVE-2016-9962, threats T2): it must not be
			// readable.
			if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd != "/" {
				answers["cwd-outside"]++
			}
			fd, err := unix.Open(exe, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			answers[errnoOf(err)]++
			if len(kept) < 64 {
				if fd, err := unix.Open(exe, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
					kept = append(kept, fd)
				}
			}
		}
	}
	for _, fd := range kept {
		w, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(w)
		}
		answers["reopen-"+errnoOf(err)]++
	}
	keys := make([]string, 0, len(answers))
	for k := range answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("pwn-exe processes=%d", len(seen))
	for _, k := range keys {
		fmt.Printf(" %s=%d", k, answers[k])
	}
	fmt.Println()
	return nil
}

// hog allocates and touches SIZE bytes (a Go size: 64M is 64 MiB), a MiB
// at a time, and keeps them: a memory limit below SIZE gets it OOM-killed.
func hog(size string) error {
	var mib int
	if _, err := fmt.Sscanf(size, "%dM", &mib); err != nil {
		return fmt.Errorf("size %q: want NM", size)
	}
	var keep [][]byte
	for i := 0; i < mib; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
	}
	fmt.Printf("hog done %d\n", len(keep))
	return nil
}

// burn spins one thread for a wall-clock duration and reports the CPU time
// it got: under a CPU quota, about quota x duration.
// burnCPU spins until the process has used d of CPU time and reports the
// wall time that took, with the app's name: how long does not depend on
// the machine's speed, only on how much CPU the app is allowed.
func burnCPU(d string) error {
	dur, err := time.ParseDuration(d)
	if err != nil {
		return err
	}
	cpu := func() time.Duration {
		var r unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &r)
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	t0, c0 := time.Now(), cpu()
	for cpu()-c0 < dur {
	}
	fmt.Printf("burn-cpu %s wall %.3f\n", os.Getenv("AC_APP_NAME"), time.Since(t0).Seconds())
	return nil
}

func burn(d string) error {
	dur, err := time.ParseDuration(d)
	if err != nil {
		return err
	}
	var r0, r1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &r0)
	for t0 := time.Now(); time.Since(t0) < dur; {
	}
	_ = unix.Getrusage(unix.RUSAGE_SELF, &r1)
	used := time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) * time.Nanosecond
	fmt.Printf("burn cpu %.3f\n", used.Seconds())
	return nil
}
