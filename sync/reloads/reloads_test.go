package reloads

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestChanged(t *testing.T) {
	for _, tc := range []struct {
		last, cur string
		want      bool
	}{
		{"", "100@1", false},      // the first look: the first reconcile covers it
		{"100@1", "100@1", false}, // the same worker
		{"100@1", "101@2", true},  // a reload
		{"100@1", "100@9", true},  // a restart that reused the pid
	} {
		if got := Changed(tc.last, tc.cur); got != tc.want {
			t.Errorf("Changed(%q, %q) = %v, want %v", tc.last, tc.cur, got, tc.want)
		}
	}
}

// worker is a socket whose answers a test sets.
type worker struct {
	mu  sync.Mutex
	id  string
	err error
}

func (w *worker) set(id string, err error) { w.mu.Lock(); w.id, w.err = id, err; w.mu.Unlock() }
func (w *worker) Process(context.Context) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id, w.err
}

// TestPokesOnANewWorker: a new worker is a poke for its target alone, once;
// a socket that fails for a while (BackAfter looks and more) and comes back
// is a poke too (class history seed 13: its follow-up's retry backs off),
// with the same worker or another, once.
func TestPokesOnANewWorker(t *testing.T) {
	a, b := &worker{id: "1"}, &worker{id: "7"}
	pokes := make(chan string, 16)
	w := &Watcher{Targets: map[string]Process{"a": a, "b": b}, Interval: 5 * time.Millisecond, Poke: func(n string) { pokes <- n }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	expectNone := func() {
		t.Helper()
		select {
		case n := <-pokes:
			t.Fatalf("poke for %s, want none", n)
		case <-time.After(60 * time.Millisecond):
		}
	}
	expect := func(want string) {
		t.Helper()
		select {
		case n := <-pokes:
			if n != want {
				t.Fatalf("poke for %s, want %s", n, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("no poke for %s", want)
		}
	}
	expectNone()
	a.set("2", nil)
	expect("a")
	expectNone()
	b.set("", errors.New("connection refused"))
	expectNone()
	b.set("7", nil)
	expect("b")
	expectNone()
	b.set("", errors.New("connection refused"))
	expectNone()
	b.set("8", nil)
	expect("b")
	expectNone()
}
