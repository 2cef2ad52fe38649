package main

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// grace is the short grace period of the SIGTERM-ignoring case.
const grace = 100 * time.Millisecond

// measureStop is issue §4: SIGTERM to the runtime, until every pod
// process is gone (the runtime reaped by the bench: pod1's run process
// exits only after PID 1, which exits after writing every status and
// reaping every process of the pod) and statuses are written.
func (b *bench) measureStop() *section {
	s := newSection("stop", "Stopping: SIGTERM to the runtime → every pod process gone", "ms",
		"SIGTERM → all gone", "app exit → all gone")
	s.chart, s.logScale = true, true
	s.ratioCol, s.chartCol = 1, 1
	s.targets = []targetLine{{5, "target: 5 ms after the app's exit"}}
	s.desc = "SIGTERM is sent to the runtime's process (pod1: the run entry point, which is what `rkt stop`'s signal " +
		"and an interrupted `rkt run` reach). \"app exit\" is the app's own exit, seen through a pidfd; \"all gone\" is " +
		"the runtime's process reaped by the bench, after which nothing of the pod is left. pod1's statuses are " +
		"checked after each run (0 for the cooperative app, 137 for the one killed at the end of its grace). " +
		"The cooperative app is the static probe exiting 0 on SIGTERM; the other ignores SIGTERM and gets a " +
		fmt.Sprintf("%v grace period (pod1: `pod1/stop-grace-period`; systemd: `TimeoutStopSec`). ", grace) +
		"systemd-nspawn without --boot forwards SIGTERM with --kill-signal=SIGTERM and has no grace period."
	termArgv := []string{"/probe", "term-exit", "0", "+", "sleep", "60s"}
	ignArgv := []string{"/probe", "ignore-term", "+", "sleep", "60s"}
	peers := []*peer{
		b.pod1StopPeer("pod1, app exits on SIGTERM", termArgv, nil, "term-exit ready", 0, ""),
		b.pod1StopPeer("pod1, app ignores SIGTERM", ignArgv,
			map[string]string{"pod1/stop-grace-period": grace.String()}, "ignore-term ready", 128+9, ""),
		b.nspawnStopPeer("systemd-nspawn (app as PID 1), app exits on SIGTERM", false, termArgv, "", "term-exit ready"),
		b.nspawnStopPeer("systemd-nspawn + systemd, app exits on SIGTERM", true, termArgv, "", ""),
		b.nspawnStopPeer("systemd-nspawn + systemd, app ignores SIGTERM", true, ignArgv,
			fmt.Sprintf("TimeoutStopSec=%dms\n", grace.Milliseconds()), ""),
	}
	// Other trees (-vs) in the same rounds: a change to the stop path is
	// judged against this tree interleaved, not across sittings, whose
	// figures differ by more than the change.
	for _, d := range b.vs {
		peers = append(peers, b.pod1StopPeer("pod1, app exits on SIGTERM, "+d, termArgv, nil, "term-exit ready", 0, d))
	}
	b.interleave(s, peers, b.stopRounds(), 1)
	// Like for like: each peer against pod1 with the same app.
	for _, r := range s.rows {
		switch {
		case r.pod1 && strings.HasPrefix(r.name, "pod1, app exits on SIGTERM, "):
			r.vs = "pod1, app exits on SIGTERM"
		case r.pod1:
		case strings.Contains(r.name, "ignores"):
			r.vs = "pod1, app ignores SIGTERM"
		default:
			r.vs = "pod1, app exits on SIGTERM"
		}
	}
	// nspawn without --boot has no grace period: an app that ignores
	// SIGTERM keeps it running. Shown once, bounded.
	r := s.row("systemd-nspawn (app as PID 1), app ignores SIGTERM", false)
	if b.tools["systemd-nspawn"] == "" {
		r.note = b.notInstalled("systemd-nspawn").Error()
	} else if err := b.nspawnIgnoreOnce(ignArgv); err != nil {
		r.note = err.Error()
	}
	return s
}

// stopRounds is how many rounds the stop measurement takes: twice the
// fast measurements', since its target is a few milliseconds judged on a
// median whose spread between rounds is as large.
func (b *bench) stopRounds() int { return 2 * b.rounds }

// stopAndTime sends SIGTERM to c and records SIGTERM → gone and app exit →
// gone; app is the app's host pid.
func stopAndTime(r *row, c *child, app int, timeout time.Duration) error {
	appExit, err := pidfdExit(app)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := unix.Kill(c.pid, unix.SIGTERM); err != nil {
		return err
	}
	if err := c.wait(timeout); err != nil {
		return err
	}
	var ta time.Time
	select {
	case ta = <-appExit:
	case <-time.After(time.Second):
		return fmt.Errorf("the app's exit was not seen")
	}
	r.m[0].add(ms(c.end.Sub(t0)))
	r.m[1].add(ms(c.end.Sub(ta)))
	return nil
}

// pod1StopPeer is pod1 stopping a pod of one app; repo, if set, is another
// tree whose binaries run it (-vs).
func (b *bench) pod1StopPeer(name string, argv []string, ann map[string]string, ready string, want int, repo string) *peer {
	return b.pod1StopPeerOpts(name, argv, ann, ready, want, podOpts{repo: repo})
}

// pod1StopPeerOpts is pod1StopPeer with the pod's settings o.
func (b *bench) pod1StopPeerOpts(name string, argv []string, ann map[string]string, ready string, want int, o podOpts) *peer {
	return &peer{name: name, pod1: true, round: func(r *row) error {
		p, c, err := b.newStartedPodOpts([]podApp{{name: "app", exec: argv, ann: ann}}, o)
		if err != nil {
			return err
		}
		defer c.close()
		defer stopChild(c, unix.SIGKILL)
		if err := c.waitOutput(ready, 10*time.Second); err != nil {
			return err
		}
		app, err := findProbe(c, c.pid, 5*time.Second)
		if err != nil {
			return err
		}
		if err := stopAndTime(r, c, app, 10*time.Second); err != nil {
			return err
		}
		if err := p.checkStatuses(want); err != nil {
			return err
		}
		return b.finishPod(p)
	}}
}

func (b *bench) nspawnStopPeer(name string, boot bool, argv []string, extra, ready string) *peer {
	var sp spec
	return &peer{name: name, setup: func() error {
		if err := b.notInstalled("systemd-nspawn"); err != nil {
			return err
		}
		if !boot {
			sp = spec{argv: b.nspawnArgs(b.fixture, append([]string{"--kill-signal=SIGTERM"}, argv...)...)}
			return nil
		}
		root, err := b.sdTree(fmt.Sprintf("stop-%d", len(extra)), argv, extra)
		sp = spec{argv: b.nspawnArgs(root, "--bind-ro=/usr", "--boot")}
		return err
	}, round: func(r *row) error {
		c, err := start(sp)
		if err != nil {
			return err
		}
		defer c.close()
		defer stopChild(c, unix.SIGKILL)
		app, err := findProbe(c, c.pid, 20*time.Second)
		if err != nil {
			return err
		}
		if ready != "" {
			if err := c.waitOutput(ready, 10*time.Second); err != nil {
				return err
			}
		} else {
			// The app's output goes to journald: give it time to
			// install its handler.
			time.Sleep(200 * time.Millisecond)
		}
		return stopAndTime(r, c, app, 20*time.Second)
	}}
}

// nspawnIgnoreOnce shows that nspawn without --boot does not stop an app
// that ignores SIGTERM: it is still running 2 s after the signal.
func (b *bench) nspawnIgnoreOnce(argv []string) error {
	c, err := start(spec{argv: b.nspawnArgs(b.fixture, append([]string{"--kill-signal=SIGTERM"}, argv...)...)})
	if err != nil {
		return err
	}
	defer c.close()
	defer stopChild(c, unix.SIGKILL)
	if err := c.waitOutput("ignore-term ready", 10*time.Second); err != nil {
		return err
	}
	_ = unix.Kill(c.pid, unix.SIGTERM)
	select {
	case <-c.done:
		return fmt.Errorf("stopped in %v", c.end.Sub(c.start))
	case <-time.After(2 * time.Second):
		return fmt.Errorf("does not stop: no grace period without --boot; still running 2 s after SIGTERM (killed by the bench)")
	}
}
