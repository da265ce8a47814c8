package reconcile

import (
	"context"
	"sync"
)

// Coalescer shares reconciles between concurrent callers: a caller that
// arrives while a reconcile runs waits for the next one, which starts when the
// running one ends and serves every caller that arrived meanwhile. So every
// caller gets a reconcile that began after its request, and a burst of events
// costs at most two reconciles. Nothing is kept once the callers are answered.
type Coalescer struct {
	run func(context.Context) (Result, error)

	mu      sync.Mutex
	running bool
	next    *call
}

type call struct {
	done chan struct{}
	res  Result
	err  error
}

// NewCoalescer returns a Coalescer around run.
func NewCoalescer(run func(context.Context) (Result, error)) *Coalescer {
	return &Coalescer{run: run}
}

// Do waits for a reconcile that starts after the call and returns its result.
// The reconcile is not cancelled when ctx is: other callers may share it.
func (c *Coalescer) Do(ctx context.Context) (Result, error) {
	c.mu.Lock()
	if c.next == nil {
		c.next = &call{done: make(chan struct{})}
	}
	cl := c.next
	if !c.running {
		c.running = true
		go c.loop(context.WithoutCancel(ctx))
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (c *Coalescer) loop(ctx context.Context) {
	for {
		c.mu.Lock()
		cl := c.next
		c.next = nil
		if cl == nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		cl.res, cl.err = c.run(ctx)
		close(cl.done)
	}
}
