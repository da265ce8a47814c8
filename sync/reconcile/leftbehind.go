package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// LeftBehindError is a target a reconcile did not wait for: no read of
// its attempt had answered a second past Straggle after another target
// had finished (a hung HAProxy of a pair: its pair check's and a
// request's timeouts), it was still busy with an attempt an earlier
// reconcile left behind, or the pass had left it behind already.
// Temporary: the next reconcile asks it again.
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
// locked) and returns what each returned. A target left behind is one
// not waited for: its attempt holds its lock and has had no answer to a
// read (a hung HAProxy of a pair: its pair check's and a request's
// timeouts) leaveAfter after another target finished without error, or
// it waits for its lock while an attempt left behind holds it. Its
// attempt goes on in the background, under its lock, on a context that
// the reconcile's return does not cancel (its caller's cancel and
// deadline do), and its result is dropped (left() says so to run); until
// it ends, a locked reconcile leaves that target behind at once rather
// than queue on it. A target that answered a read is waited for: a slow
// write (a reload's) is no hang. Before, every target waited for the
// slowest: the hung one held the one that answered, and in many-Services
// mode every Service's servers and a left Service's frontend with it
// (history seed 682573831, class, HAProxy 2.6: the next claimant of a
// port refused 16 s on the HAProxy that was up). An attempt in flight is
// never cut by the wait: a write cut halfway is one whose outcome nobody
// knows.
//
// Unlocked (a dry run, or one from a snapshot) an attempt only reads: it
// runs on ctx, cut when the reconcile ends. From a snapshot (failFast) the
// first target that fails ends the wait: the reconcile runs afresh anyway.
func (r *Reconciler) eachTarget(ctx context.Context, targets []Driver, locked, failFast bool, run func(ctx context.Context, t Driver, left func() bool) ([]TargetResult, bool)) [][]TargetResult {
	locks := r.Locks
	if locks == nil {
		locks = &r.locks
	}
	rctx, done := ctx, func() {}
	if locked {
		rctx, done = detached(ctx)
	}
	const running, finished, abandoned = 0, 1, 2
	n := len(targets)
	results, out := make([][]TargetResult, n), make([][]TargetResult, n)
	state := make([]int, n)
	attempts := make([]*attempt, n)
	var mu sync.Mutex
	first, failed := make(chan struct{}), make(chan struct{})
	var firstAt time.Time
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
		a := &attempt{}
		attempts[i] = a
		wg.Add(1)
		go func() {
			defer wg.Done()
			left := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return state[i] == abandoned
			}
			actx := context.WithValue(rctx, attemptKey{}, a)
			var res []TargetResult
			ok := false
			if locked {
				if unlock, err := locks.lockUnlessLeft(actx, t.Name()); err != nil {
					res = r.leftBehind(t, err)
				} else {
					a.locked.Store(true)
					res, ok = run(actx, t, left)
					unlock()
				}
			} else {
				a.locked.Store(true)
				res, ok = run(actx, t, left)
			}
			mu.Lock()
			results[i] = res
			if state[i] == abandoned && locked {
				locks.release(t.Name())
			}
			state[i] = finished
			mu.Unlock()
			if ok {
				once.Do(func() {
					mu.Lock()
					firstAt = time.Now()
					mu.Unlock()
					close(first)
				})
			} else if failFast {
				failOnce.Do(func() { close(failed) })
			}
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); done(); close(all) }()
	hung := func(i int) bool { // under mu
		a := attempts[i]
		return state[i] == running && a != nil && a.locked.Load() && !a.answered.Load()
	}
	wait := func(d time.Duration) bool { // whether the wait is over
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-all:
			return true
		case <-failed:
			return true
		case <-ctx.Done():
			<-all // cut by the caller or the deadline: they end now
			return true
		case <-t.C:
			return false
		}
	}
	select {
	case <-all:
	case <-failed:
	case <-ctx.Done():
		<-all
	case <-first:
		mu.Lock()
		since := firstAt
		mu.Unlock()
		for !wait(time.Until(since.Add(r.leaveAfter()))) {
			// Waited enough: leave the hung; wait on for those that
			// answered a read, or queue behind another's lock, a little
			// at a time (a lock's holder may be left behind meanwhile).
			mu.Lock()
			others := false
			for i := range targets {
				if hung(i) {
					state[i] = abandoned
					if locked {
						locks.hold(targets[i].Name())
					}
				}
				others = others || state[i] == running
			}
			mu.Unlock()
			if !others {
				break
			}
			since = time.Now().Add(100*time.Millisecond - r.leaveAfter())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, t := range targets {
		switch {
		case out[i] != nil:
		case state[i] == finished:
			out[i] = results[i]
		case state[i] == abandoned:
			out[i] = r.leftBehind(t, &LeftBehindError{After: r.leaveAfter()})
			r.log().Warn("target left behind", "target", t.Name(), "error", out[i][0].Error)
		default:
			// The wait ended for another reason (a snapshot's first
			// failure): an unlocked read, cut when the reconcile ends.
			out[i] = r.leftBehind(t, errors.New("not waited for: the reconcile ended"))
		}
	}
	return out
}

// attempt is what eachTarget knows of one target's attempt in flight.
type attempt struct {
	locked   atomic.Bool // holds its lock (or needs none)
	answered atomic.Bool // a read of HAProxy answered (syncBackend)
}

type attemptKey struct{}

// readAnswered tells ctx's attempt that HAProxy answered a read: it is no
// hang, whatever its writes take.
func readAnswered(ctx context.Context) {
	if a, ok := ctx.Value(attemptKey{}).(*attempt); ok {
		a.answered.Store(true)
	}
}

type callerKey struct{}

// detached returns a context with ctx's values and deadline that ends
// when the caller's context (Reconcile's) does, not when ctx does: an
// attempt left behind outlives the reconcile's return, not a shutdown.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	d, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var c2 context.CancelFunc
		d, c2 = context.WithDeadline(d, dl)
		c1 := cancel
		cancel = func() { c2(); c1() }
	}
	caller, ok := ctx.Value(callerKey{}).(context.Context)
	if !ok {
		caller = ctx
	}
	stop := context.AfterFunc(caller, cancel)
	return d, func() { stop(); cancel() }
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

// lockUnlessLeft is Lock, given up (LeftBehindError, Busy) once target
// is left behind by the attempt that holds it.
func (l *Locks) lockUnlessLeft(ctx context.Context, target string) (unlock func(), err error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		unlock, err := l.Lock(wctx, target)
		cancel()
		if err == nil || ctx.Err() != nil {
			return unlock, err
		}
		if l.busy(target) {
			return nil, &LeftBehindError{Busy: true}
		}
	}
}

func (l *Locks) busy(target string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left[target] > 0
}
