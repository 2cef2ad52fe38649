package machined

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// Only a UUID names a machine.
func TestName(t *testing.T) {
	if n, err := Name("0b1e7f8a-3c4d-4e5f-8a9b-0c1d2e3f4a5b"); err != nil || n != "rkt-0b1e7f8a-3c4d-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Fatalf("Name: %q %v", n, err)
	}
	for _, bad := range []string{"", "x", "../../etc", "0B1E7F8A-3C4D-4E5F-8A9B-0C1D2E3F4A5B", "0b1e7f8a-3c4d-4e5f-8a9b-0c1d2e3f4a5b\n"} {
		if _, err := Name(bad); err == nil {
			t.Errorf("Name(%q): no error", bad)
		}
		if _, err := (Pod{UUID: bad, Leader: 2, Root: "/"}).args(); err == nil {
			t.Errorf("args of %q: no error", bad)
		}
	}
	if _, err := (Pod{UUID: "0b1e7f8a-3c4d-4e5f-8a9b-0c1d2e3f4a5b", Leader: 2, Root: "rel"}).args(); err == nil {
		t.Error("a relative root: no error")
	}
}

// A bus that accepts the connection and never answers costs one Timeout,
// then an error saying so: the pod's start goes on.
func TestHungBusIsBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	start := time.Now()
	err = call(sock, manager+".RegisterMachine")
	took := time.Since(start)
	if !errors.Is(err, errTimeout) {
		t.Fatalf("call on a silent bus: %v, want a timeout", err)
	}
	if took < Timeout || took > Timeout+2*time.Second {
		t.Fatalf("call on a silent bus took %v, want about %v", took, Timeout)
	}
}
