package lb

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

// DefaultStraggle is how long after the first target answered the others
// are waited for (Manager.Straggle when 0): a pair's HAProxies answer
// within milliseconds of each other, and a hung one must not hold back the
// frontends, the left Services and every class Service's servers on the
// one that answers until RECONCILE_TIMEOUT (history seed 534110162, class,
// HAProxy 3.0: a refused Service's old port served its pods 20 s on the
// target that was up, while its pair hung).
const DefaultStraggle = 3 * time.Second

// detachedFor bounds a pass left running in the background when the
// caller's context has no deadline.
const detachedFor = 30 * time.Second

// StragglingError is a target left behind: it had not answered Straggle
// after another target had, or was still busy with an earlier pass.
// Temporary: the next pass asks it again.
type StragglingError struct {
	After time.Duration
	Busy  bool
}

func (e *StragglingError) Error() string {
	if e.Busy {
		return "still answering an earlier pass: left behind this one"
	}
	return fmt.Sprintf("no answer %v after another target answered: left behind this pass", e.After)
}

// Class is failure.Temporary: a retry may well find it answering.
func (e *StragglingError) Class() failure.Class { return failure.Temporary }

// busyTargets counts, by target, the passes left running there in the
// background (eachTarget): a new pass does not start on a target while one
// is, so that a hung target holds one goroutine, not one per pass.
type busyTargets struct {
	mu sync.Mutex
	n  map[int]int
}

// eachTarget runs run for each of n targets at once and returns what each
// returned, or, for a target left behind, a StragglingError: one still
// running straggle after another answered (run said ok), or still busy
// with a pass left behind before. A target left behind is never cut: its
// attempt in flight goes on in the background, on a context the caller's
// end does not cancel (bounded by the caller's deadline, or detachedFor),
// and its result is dropped. Passes that run at once (two Services'
// reconciles) each run on every target. No target that answers waits for
// one that does not.
func eachTarget[R any](ctx context.Context, busy *busyTargets, n int, straggle time.Duration, run func(ctx context.Context, i int) (r R, ok bool)) (out []R, left []error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachedFor)
	if d, ok := ctx.Deadline(); ok {
		cancel()
		dctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	const running, finished, abandoned = 0, 1, 2
	results := make([]R, n)
	state := make([]int, n) // guarded by busy.mu
	left = make([]error, n)
	first := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	busy.mu.Lock()
	for i := range n {
		if busy.n[i] > 0 {
			left[i] = &StragglingError{Busy: true}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, ok := run(dctx, i)
			busy.mu.Lock()
			results[i] = r
			if state[i] == abandoned {
				if busy.n[i]--; busy.n[i] == 0 {
					delete(busy.n, i)
				}
			}
			state[i] = finished
			busy.mu.Unlock()
			if ok {
				once.Do(func() { close(first) })
			}
		}()
	}
	busy.mu.Unlock()
	all := make(chan struct{})
	go func() { wg.Wait(); cancel(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
	case <-first:
		t := time.NewTimer(straggle)
		select {
		case <-all:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	out = make([]R, n)
	busy.mu.Lock()
	defer busy.mu.Unlock()
	for i := range n {
		switch {
		case left[i] != nil:
		case state[i] == finished:
			out[i] = results[i]
		default:
			state[i] = abandoned
			if busy.n == nil {
				busy.n = map[int]int{}
			}
			busy.n[i]++
			left[i] = &StragglingError{After: straggle}
		}
	}
	return out, left
}
