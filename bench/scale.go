package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// measureScale is issue §6: a pod of 100 apps from exec of run to every
// app running, and one PID 1 running 1000 short-lived apps one after the
// other through the restart policy.
func (b *bench) measureScale() []*section {
	const napps, nruns = 100, 1000
	s := newSection("scale", "Scale", "ms", "total", "per app")
	s.noRatio = true
	s.desc = fmt.Sprintf("%d apps: a pod of %d apps, each the tiny `ready` executable (it writes one byte into a FIFO "+
		"hard-linked into every app's root, then pauses); timed from exec of run until the bench has read %d bytes, "+
		"i.e. every app is running its own code. The pod is then stopped with SIGTERM (untimed). "+
		"%d short-lived apps: one app running the tiny `true` with `pod1/restart-policy=always`, "+
		"`pod1/restart-backoff=0s`, `pod1/start-limit-burst=%d`, `pod1/start-limit-interval=1h`: one PID 1 "+
		"starts it %d times (each run in a fresh cgroup, its status recorded) and the pod ends when the start limit "+
		"is reached; timed from exec of run to its exit.", napps, napps, napps, nruns, nruns, nruns)
	many := s.row(fmt.Sprintf("pod1: %d apps, start → all running", napps), true)
	restarts := s.row(fmt.Sprintf("pod1: %d short-lived apps under one PID 1", nruns), true)
	for i := -1; i < min(b.rounds, 5); i++ {
		if err := many.record(i < 0, func(r *row) error { return b.scaleApps(r, napps) }); err != nil {
			b.logf("scale: apps: %v", err)
		}
		// The restarts warm themselves up (1000 runs each): no warm-up
		// round, and three measured ones.
		if i >= 0 && i < 3 {
			if err := restarts.record(false, func(r *row) error { return b.scaleRestarts(r, nruns) }); err != nil {
				b.logf("scale: restarts: %v", err)
			}
		}
		fmt.Fprint(os.Stderr, ".")
	}
	fmt.Fprintln(os.Stderr)
	return []*section{s}
}

func (b *bench) scaleApps(r *row, n int) error {
	apps := make([]podApp, n)
	for i := range apps {
		apps[i] = podApp{name: fmt.Sprintf("app%d", i), exec: []string{"/ready"}}
	}
	p, err := b.newPod(apps)
	if err != nil {
		return err
	}
	// O_RDWR: opening never blocks, and the pipe never sees EOF.
	fifo, err := os.OpenFile(b.readyFifo, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fifo.Close()
	drain(fifo)
	c, err := b.startPod(p)
	if err != nil {
		return err
	}
	defer c.close()
	defer stopChild(c, unix.SIGKILL)
	got := 0
	buf := make([]byte, n)
	_ = fifo.SetReadDeadline(time.Now().Add(30 * time.Second))
	for got < n {
		k, err := fifo.Read(buf[:n-got])
		if err != nil {
			return fmt.Errorf("%d of %d apps running: %w: %s", got, n, err, c.output(300))
		}
		got += k
	}
	t := time.Since(c.start)
	r.m[0].add(ms(t))
	r.m[1].add(ms(t) / float64(n))
	_ = unix.Kill(c.pid, unix.SIGTERM)
	if err := c.wait(30 * time.Second); err != nil {
		return err
	}
	if err := p.checkStatuses(128 + int(unix.SIGTERM)); err != nil {
		return err
	}
	return b.finishPod(p)
}

// drain empties the FIFO of bytes a failed round left.
func drain(f *os.File) {
	buf := make([]byte, 4096)
	for {
		_ = f.SetReadDeadline(time.Now().Add(time.Millisecond))
		if k, err := f.Read(buf); k == 0 || err != nil {
			return
		}
	}
}

func (b *bench) scaleRestarts(r *row, n int) error {
	p, c, err := b.newStartedPod([]podApp{{name: "app", exec: []string{"/true"}, ann: map[string]string{
		"pod1/restart-policy":       "always",
		"pod1/restart-backoff":      "0s",
		"pod1/start-limit-burst":    fmt.Sprint(n),
		"pod1/start-limit-interval": "1h",
	}}})
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.wait(120 * time.Second); err != nil {
		return err
	}
	if err := p.checkStatuses(0); err != nil {
		return fmt.Errorf("%w (exit %d: %s)", err, c.code(), c.output(300))
	}
	t := c.elapsed()
	r.m[0].add(ms(t))
	r.m[1].add(ms(t) / float64(n))
	return b.finishPod(p)
}
