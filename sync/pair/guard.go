package pair

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Guard.
const (
	// DefaultSettle is how long Check waits before reading views that
	// differ again (a reload in between).
	DefaultSettle = time.Second
	// DefaultTimeout bounds one check, so that a hung socket or API does
	// not hold the reconcile that asked.
	DefaultTimeout = 5 * time.Second
)

// Guard keeps one target's verdict: Verify checks and answers the mismatch,
// if any; Mismatch answers the verdict kept. It logs once when a mismatch
// begins and once when it ends, and tells OnChange. Safe for concurrent
// use.
type Guard struct {
	Pair               int    // position, from 1
	Dataplane, Runtime string // URLs without credentials
	DataplaneView      Reader
	RuntimeView        Reader
	// Settle and Timeout: zero takes the defaults.
	Settle, Timeout time.Duration
	// OnChange, when set, is told every verdict that says same or
	// different, with whether the pair is mismatched.
	OnChange func(mismatched bool)
	Log      *slog.Logger

	// running holds the one check at a time; a wait for it ends with
	// the waiter's context.
	once    sync.Once
	running chan struct{}
	waiting atomic.Int32 // calls waiting to run a check (tests)

	mu       sync.Mutex
	mismatch *MismatchError // nil: not known to be mismatched
	pass     any            // the pass the last Verify checked in
	ended    time.Time      // when the last check ended
}

// Check reads both views now and keeps the verdict. A view that cannot be
// read leaves the previous verdict (an unreachable HAProxy is the target's
// own failure, told by its reads).
func (g *Guard) Check(ctx context.Context) (Outcome, error) {
	if err := g.acquire(ctx); err != nil {
		return Outcome{}, err
	}
	defer g.release()
	return g.check(ctx)
}

// acquire waits for no other check to run, or for ctx to end.
func (g *Guard) acquire(ctx context.Context) error {
	g.once.Do(func() { g.running = make(chan struct{}, 1) })
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case g.running <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *Guard) release() { <-g.running }

// Verify checks, unless it already did in this pass, and returns the
// target's *MismatchError while it is mismatched, nil otherwise (also when
// the views cannot be read and none was kept). A pass is any comparable
// token (one reconcile, or a whole many-Services pass); nil checks every
// time. A reconcile reads every backend of a target, and each read
// verifies: one check serves them all, and a view that hangs costs one
// Timeout, not one per read. Concurrent calls wait for one check, and a
// check that ended while Verify waited for it (serve's start-up check, run
// in the background: checkPairs) serves the pass too: before, the first
// reconcile after it checked again, a slow pair's two Timeouts in a row.
// A wait cut by ctx answers the verdict kept.
func (g *Guard) Verify(ctx context.Context, pass any) error {
	asked := time.Now()
	if g.acquire(ctx) != nil {
		return g.Mismatch()
	}
	// Released even when a Reader or OnChange panics (the reconcile's
	// recover goes on): held, every later check would wait for good.
	defer g.release()
	g.mu.Lock()
	done := pass != nil && (pass == g.pass || !g.ended.Before(asked))
	g.mu.Unlock()
	if !done {
		_, _ = g.check(ctx)
	}
	g.mu.Lock()
	g.pass = pass
	g.mu.Unlock()
	return g.Mismatch()
}

// Mismatch returns the kept *MismatchError, nil when the pair is not known
// to be mismatched; it checks nothing.
func (g *Guard) Mismatch() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mismatch != nil {
		return g.mismatch
	}
	return nil
}

func (g *Guard) check(ctx context.Context) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, or(g.Timeout, DefaultTimeout))
	defer cancel()
	settle := or(g.Settle, DefaultSettle)
	if g.Mismatch() != nil {
		settle = 0 // a reload cannot explain a difference seen before
	}
	o, err := Check(ctx, g.RuntimeView, g.DataplaneView, settle)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil || !errors.Is(ctx.Err(), context.Canceled) {
		// Read, or failed on its own (its Timeout): a verdict a waiting
		// Verify may take; one cut by its caller is none.
		g.ended = time.Now()
	}
	if err != nil {
		g.logger().Debug("cannot check that the runtime socket and the Data Plane API reach the same HAProxy", "pair", g.Pair, "error", err)
		return o, err
	}
	switch o.Verdict {
	case Different:
		e := &MismatchError{Pair: g.Pair, Dataplane: g.Dataplane, Runtime: g.Runtime, Outcome: o}
		if g.mismatch == nil {
			g.logger().Error("the runtime socket and the Data Plane API reach different HAProxy: nothing is written to this target until they match",
				"target", g.Dataplane, "error", e.Error())
		}
		g.mismatch = e
		g.changed(true)
	case Same:
		if g.mismatch != nil {
			g.logger().Info("the runtime socket and the Data Plane API reach the same HAProxy again: writes resume",
				"target", g.Dataplane, "runtime", g.Runtime, "pair", g.Pair, "process", o.Runtime.String())
		}
		g.mismatch = nil
		g.changed(false)
	}
	return o, nil
}

func (g *Guard) changed(mismatched bool) {
	if g.OnChange != nil {
		g.OnChange(mismatched)
	}
}

func (g *Guard) logger() *slog.Logger {
	if g.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Log
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
