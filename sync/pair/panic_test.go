package pair

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// panicky panics on its first read (a bug in a Reader, recovered by the
// reconcile's safeRun / the queue's recover), then answers p.
type panicky struct {
	n atomic.Int32
	p Process
}

func (v *panicky) ProcessInfo(context.Context) (Process, error) {
	if v.n.Add(1) == 1 {
		panic("reader bug")
	}
	return v.p, nil
}

// TestVerifyAfterAPanic: a panic inside Verify's check, recovered by
// the caller, must not wedge the guard: the next Verify checks again.
func TestVerifyAfterAPanic(t *testing.T) {
	rt, dp := &panicky{p: up(7, "a", 5)}, &panicky{p: up(8, "b", 5)}
	dp.n.Store(1) // only the runtime view panics, once
	g := &Guard{DataplaneView: dp, RuntimeView: rt, Settle: time.Millisecond, Timeout: time.Second}
	func() {
		defer func() { _ = recover() }()
		_ = g.Verify(context.Background(), new(int))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := g.Verify(ctx, new(int))
	if err == nil {
		t.Fatalf("after a recovered panic: Verify answered nil in %v (reads: rt %d, dp %d), want the mismatch of a fresh check", time.Since(began).Round(time.Millisecond), rt.n.Load(), dp.n.Load())
	}
}
