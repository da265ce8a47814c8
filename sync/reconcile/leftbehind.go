package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// LeftBehindError is a target a reconcile did not wait for: its attempt
// was still in flight a second past Straggle after another target had
// finished (a hung
// HAProxy of a pair: its pair check's and a request's timeouts), or it was
// still busy with an attempt an earlier reconcile left behind. Temporary:
// the next reconcile asks it again.
type LeftBehindError struct {
	After time.Duration
	Busy  bool
	// Pass: left behind earlier in the same pass (WithBehind).
	Pass bool
}

func (e *LeftBehindError) Error() string {
	switch {
	case e.Busy:
		return "still answering an earlier reconcile: left behind this one"
	case e.Pass:
		return "left behind earlier in this pass (no answer): not asked again"
	}
	return fmt.Sprintf("no answer %v after another target finished: left behind this reconcile", e.After)
}

// Class is failure.Temporary: a retry may well find it answering.
func (e *LeftBehindError) Class() failure.Class { return failure.Temporary }

func (r *Reconciler) straggle() time.Duration { return cmp.Or(r.Straggle, 3*time.Second) }

// leaveAfter is how long after another target finished one whose attempt
// is still in flight is left behind: a second past the straggle, by which
// one that keeps failing has stopped its retries with its own error
// (stragglers).
func (r *Reconciler) leaveAfter() time.Duration { return r.straggle() + time.Second }

// eachTarget runs run on every target at once (each under its lock when
// locked) and returns what each returned. A target still running
// leaveAfter another finished without error is left behind: its
// attempt goes on in the background, under its lock, on a context the
// caller's end does not cancel (bounded by the same deadline), and its
// result is dropped (left() says so to run); until it ends, a locked
// reconcile leaves that target behind at once rather than queue on it. Before,
// every target waited for the slowest: a hung HAProxy of a pair held the
// one that answered for its pair check and a request's timeout, and in
// many-Services mode every Service's servers and a left Service's frontend
// with it (history seed 682573831, class, HAProxy 2.6: the next claimant
// of a port refused 16 s on the HAProxy that was up). An attempt in flight
// is never cut: a write cut halfway is one whose outcome nobody knows.
//
// Unlocked (a dry run, or one from a snapshot) an attempt only reads: it
// runs on ctx, cut when the reconcile ends. From a snapshot (failFast) the
// first target that fails ends the wait: the reconcile runs afresh anyway.
func (r *Reconciler) eachTarget(ctx context.Context, targets []Driver, locked, failFast bool, run func(ctx context.Context, t Driver, left func() bool) ([]TargetResult, bool)) [][]TargetResult {
	locks := r.Locks
	if locks == nil {
		locks = &r.locks
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Timeout)
	if d, ok := ctx.Deadline(); ok {
		cancel()
		dctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	rctx := dctx
	if !locked {
		rctx = ctx
	}
	const running, finished, abandoned = 0, 1, 2
	n := len(targets)
	results, out := make([][]TargetResult, n), make([][]TargetResult, n)
	state := make([]int, n)
	var mu sync.Mutex
	first, failed := make(chan struct{}), make(chan struct{})
	var once, failOnce sync.Once
	var wg sync.WaitGroup
	for i, t := range targets {
		if locked && locks.busy(t.Name()) {
			state[i] = finished
			out[i] = r.leftBehind(t, &LeftBehindError{Busy: true})
			continue
		}
		if BehindOf(ctx)[t.Name()] && len(targets) > 1 {
			state[i] = finished
			out[i] = r.leftBehind(t, &LeftBehindError{Pass: true})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			left := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return state[i] == abandoned
			}
			var res []TargetResult
			ok := false
			if locked {
				if unlock, err := locks.Lock(rctx, t.Name()); err != nil {
					res = r.leftBehind(t, err)
				} else {
					res, ok = run(rctx, t, left)
					unlock()
				}
			} else {
				res, ok = run(rctx, t, left)
			}
			mu.Lock()
			results[i] = res
			if state[i] == abandoned && locked {
				locks.release(t.Name())
			}
			state[i] = finished
			mu.Unlock()
			if ok {
				once.Do(func() { close(first) })
			} else if failFast {
				failOnce.Do(func() { close(failed) })
			}
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); cancel(); close(all) }()
	select {
	case <-all:
	case <-failed:
	case <-first:
		t := time.NewTimer(r.leaveAfter())
		select {
		case <-all:
		case <-failed:
		case <-ctx.Done():
			r.endedBy(ctx, all)
		case <-t.C:
		}
		t.Stop()
	case <-ctx.Done():
		r.endedBy(ctx, all)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, t := range targets {
		switch {
		case out[i] != nil:
		case state[i] == finished:
			out[i] = results[i]
		default:
			state[i] = abandoned
			if locked {
				locks.hold(t.Name())
			}
			out[i] = r.leftBehind(t, &LeftBehindError{After: r.leaveAfter()})
			r.log().Warn("target left behind", "target", t.Name(), "error", out[i][0].Error)
		}
	}
	return out
}

type behindKey struct{}

// WithBehind returns a context whose reconciles leave targets behind at
// once, as a part of the same pass did (a many-Services pass's frontends:
// services.FrontendReport.Behind): a hung HAProxy of a pair is waited for
// once per pass, not once per stage and Service. A reconcile of one target
// alone still asks it.
func WithBehind(ctx context.Context, targets []string) context.Context {
	if len(targets) == 0 {
		return ctx
	}
	m := maps.Clone(BehindOf(ctx))
	if m == nil {
		m = map[string]bool{}
	}
	for _, t := range targets {
		m[t] = true
	}
	return context.WithValue(ctx, behindKey{}, m)
}

// BehindOf returns the targets ctx leaves behind (WithBehind), nil if none.
func BehindOf(ctx context.Context) map[string]bool {
	m, _ := ctx.Value(behindKey{}).(map[string]bool)
	return m
}

// endedBy waits, once ctx ended, for every attempt when its deadline did
// (theirs is the same: they end now, with what they say of it); a caller
// gone leaves them behind.
func (r *Reconciler) endedBy(ctx context.Context, all <-chan struct{}) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		<-all
	}
}

// leftBehind is the result of target for each backend when it was not
// reconciled for err.
func (r *Reconciler) leftBehind(t Driver, err error) []TargetResult {
	var out []TargetResult
	for _, pb := range r.Options.Backends {
		out = append(out, TargetResult{Target: t.Name(), Backend: pb.Backend, Error: err.Error(), ErrorClass: failure.Temporary,
			Add: []string{}, Update: []string{}, Drain: []string{}, Maint: []string{}, Delete: []string{}})
	}
	return out
}

// hold counts an attempt left running on target; busy says whether one is.
func (l *Locks) hold(target string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left == nil {
		l.left = map[string]int{}
	}
	l.left[target]++
}

func (l *Locks) release(target string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left[target]--; l.left[target] <= 0 {
		delete(l.left, target)
	}
}

func (l *Locks) busy(target string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left[target] > 0
}
