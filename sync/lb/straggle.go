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

// StragglingError is a target left behind: it had not answered Straggle
// after another target had. Temporary: the next pass asks it again.
type StragglingError struct{ After time.Duration }

func (e *StragglingError) Error() string {
	return fmt.Sprintf("no answer %v after the other targets answered: left behind this pass", e.After)
}

// Class is failure.Temporary: a retry may well find it answering.
func (e *StragglingError) Class() failure.Class { return failure.Temporary }

// eachTarget runs fn for each of n targets at once, each with a context of
// its own, and returns once all returned. Once one returned, the others
// get straggle more; then their context is cancelled with a
// StragglingError as its cause (context.Cause), which fn's error carries
// (stragglingErr). No target that answered is held back by one that does
// not.
func eachTarget(ctx context.Context, n int, straggle time.Duration, fn func(ctx context.Context, i int)) {
	ctxs := make([]context.Context, n)
	cancels := make([]context.CancelCauseFunc, n)
	for i := range n {
		ctxs[i], cancels[i] = context.WithCancelCause(ctx)
	}
	var wg sync.WaitGroup
	first := make(chan struct{})
	var once sync.Once
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctxs[i], i)
			once.Do(func() { close(first) })
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-first:
		t := time.NewTimer(straggle)
		select {
		case <-all:
		case <-t.C:
			for _, cancel := range cancels {
				cancel(&StragglingError{After: straggle}) // a returned target's is a no-op
			}
			<-all
		}
		t.Stop()
	}
	for _, cancel := range cancels {
		cancel(nil)
	}
}

// stragglingErr is err, or the StragglingError that cancelled ctx beside it.
func stragglingErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if s, ok := context.Cause(ctx).(*StragglingError); ok {
		return fmt.Errorf("%w (%v)", s, err)
	}
	return err
}
