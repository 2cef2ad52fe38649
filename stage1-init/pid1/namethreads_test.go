package pid1

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// threadNames lists the names of this process's threads.
func threadNames(t *testing.T) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/comm")
		if err != nil {
			continue // gone since the listing
		}
		names = append(names, strings.TrimSpace(string(b)))
	}
	return names
}

// Threads the runtime starts while nameThreads runs, from threads not yet
// named, take the old name; nameThreads must still leave none unnamed.
// The runtime is made to start threads throughout: goroutines lock their
// thread, block in a raw sleep and exit locked, which ends the thread, so
// every new one needs another.
func TestNameThreadsWhileTheRuntimeStartsThreads(t *testing.T) {
	for round := range 200 {
		name := fmt.Sprintf("nt-%d", round)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					var inner sync.WaitGroup
					for range 8 {
						inner.Add(1)
						go func() {
							defer inner.Done()
							// Exiting locked ends the thread.
							runtime.LockOSThread()
							ts := unix.Timespec{Nsec: 200_000}
							_ = unix.Nanosleep(&ts, nil)
						}()
					}
					inner.Wait()
				}
			}()
		}
		nameThreads(name)
		close(stop)
		wg.Wait()
		for _, n := range threadNames(t) {
			if n != name {
				t.Fatalf("round %d: a thread is named %q after nameThreads(%q)", round, n, name)
			}
		}
	}
}
