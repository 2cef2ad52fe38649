package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The bench binary is also the reaping benchmark's app, run inside the pod
// (or under tini or catatonit as PID 1) as `bench helper reap N ORPHAN MODE`:
//
//  1. a short-lived spawner child starts N orphan processes (the tiny
//     ORPHAN executable) one after the other and exits, so all N are
//     re-parented to PID 1;
//  2. MODE burst: every orphan blocks reading the release pipe, and
//     closing it releases them all at once; MODE timed: every orphan lives
//     one second from its own start, so they exit at the pace they were
//     started, as the children of a double-forking app do;
//  3. each orphan writes its CLOCK_MONOTONIC time to the times pipe as its
//     last act before exit_group, so the largest time read is the last
//     exit, and EOF on the pipe means every orphan is gone past exit;
//  4. the helper then lists /proc (the pod's pid namespace) until only
//     PID 1 and itself are left: every zombie has been reaped.
//
// It prints one line: "reap N START LAST ZERO" (monotonic nanoseconds;
// START is the release, or the spawner's start in timed mode). ZERO - LAST
// is an upper bound of the reaper's lag after the last exit: it includes
// our own wake-up on EOF and one listing of /proc.

func helperMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "bench helper: want reap or spawn")
		return 2
	}
	var err error
	switch args[0] {
	case "reap":
		err = helperReap(args[1:])
	case "spawn":
		err = helperSpawn(args[1:])
	default:
		err = fmt.Errorf("unknown helper %q", args[0])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench helper %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func helperReap(args []string) error {
	if len(args) != 3 || args[2] != "burst" && args[2] != "timed" {
		return errors.New("usage: reap N ORPHAN burst|timed")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	burst := args[2] == "burst"
	relR, relW, err := os.Pipe()
	if err != nil {
		return err
	}
	timesR, timesW, err := os.Pipe()
	if err != nil {
		return err
	}
	// Room for every orphan's 16 bytes, so none waits on us to exit.
	_, _ = unix.FcntlInt(timesR.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	begin := monoNow()
	sp, err := os.StartProcess(self, []string{"bench", "helper", "spawn", args[0], args[1]}, &os.ProcAttr{
		Files: []*os.File{relR, timesW, os.Stderr},
	})
	if err != nil {
		return err
	}
	relR.Close()
	timesW.Close()
	st, err := sp.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		return fmt.Errorf("spawner: %v", st)
	}
	if burst {
		// Let the last orphans reach their read.
		time.Sleep(100 * time.Millisecond)
		begin = monoNow()
	}
	relW.Close()
	last, got, err := readTimes(timesR)
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%d of %d orphans reported", got, n)
	}
	zero, err := waitNoZombies(10 * time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("reap %d %d %d %d\n", n, begin, last, zero)
	return nil
}

// readTimes reads the orphans' exit times until EOF and returns the last.
func readTimes(r *os.File) (last int64, got int, err error) {
	buf := make([]byte, 16*4096)
	var pending []byte
	for {
		k, err := r.Read(buf)
		pending = append(pending, buf[:k]...)
		for len(pending) >= 16 {
			t := int64(binary.LittleEndian.Uint64(pending[0:]))*1e9 + int64(binary.LittleEndian.Uint64(pending[8:]))
			last = max(last, t)
			got++
			pending = pending[16:]
		}
		if errors.Is(err, io.EOF) {
			return last, got, nil
		}
		if err != nil {
			return 0, 0, err
		}
	}
}

// waitNoZombies lists /proc until it holds no process but PID 1 and us,
// and returns the time it first saw that.
func waitNoZombies(timeout time.Duration) (int64, error) {
	self := os.Getpid()
	deadline := monoNow() + int64(timeout)
	buf := make([]byte, 1<<16)
	for {
		others, err := countOthers(buf, self)
		now := monoNow()
		if err != nil {
			return 0, err
		}
		if others == 0 {
			return now, nil
		}
		if now > deadline {
			return 0, fmt.Errorf("%d processes left after %v", others, timeout)
		}
		// Let the reaper have this CPU if it was woken on it: a
		// listing loop that never yields holds its CPU for a whole
		// scheduler slice (~3 ms) against a woken reaper thread placed
		// on it, which measured our own polling, not the reaper.
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

func countOthers(buf []byte, self int) (int, error) {
	fd, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	n := 0
	for {
		k, err := unix.Getdents(fd, buf)
		if err != nil {
			return 0, err
		}
		if k <= 0 {
			return n, nil
		}
		for off := 0; off < k; {
			reclen := int(binary.LittleEndian.Uint16(buf[off+16:]))
			name := buf[off+19 : off+reclen]
			if i := indexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if pid, ok := atoiBytes(name); ok && pid != 1 && pid != self {
				n++
			}
			off += reclen
		}
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func atoiBytes(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// helperSpawn starts N orphans with our stdin and stdout and exits.
func helperSpawn(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: spawn N ORPHAN")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	attr := &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}}
	for i := 0; i < n; i++ {
		p, err := os.StartProcess(args[1], []string{"orphan"}, attr)
		if err != nil {
			return fmt.Errorf("orphan %d: %w", i, err)
		}
		_ = p.Release()
	}
	return nil
}
