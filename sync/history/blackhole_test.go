package history

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestBlackHoleNeitherRefusesNorAnswers: a connection to a black hole
// times out (a dead node behind a network that drops), where one to a
// stopped pod is refused at once; once let go, the address refuses again.
func TestBlackHoleNeitherRefusesNorAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a closed port: %v, want refused", err)
	}
	h, err := openBlackHole(addr)
	if err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a black hole: %v, want a timeout", err)
	}
	h.close()
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a black hole let go: %v, want refused", err)
	}
}
