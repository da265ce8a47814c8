package reconcile

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
)

// Coalescer shares reconciles between concurrent callers: a caller that
// arrives while a reconcile runs waits for the next one, which starts when the
// running one ends and serves every caller that arrived meanwhile. So every
// caller gets a reconcile that began after its request, and a burst of events
// costs at most two reconciles. Nothing is kept once the callers are answered.
//
// Callers are of two kinds: Do waits for the result (an HTTP request), Poke
// does not (a watch event, a resync tick); a poked reconcile's result goes to
// OnPoked.
type Coalescer struct {
	run func(context.Context) (Result, error)
	// base is the context poked reconciles run in.
	base context.Context
	// onPoked, when set, receives the result of each reconcile that served
	// at least one poke.
	onPoked func(Result, error)
	// follow, when set, is told every result and pokes again (FollowUp);
	// followed is told of each of its pokes.
	follow   *FollowUp
	followed func(reason string, coalesced bool)

	mu      sync.Mutex
	running bool
	current *call // the reconcile running now; nil between two
	next    *call
	idle    chan struct{} // closed when no reconcile runs or waits
	// lanes reconcile one target each (OnlyTarget), for the follow-up's
	// entries; made on first use.
	lanes map[string]*Coalescer
}

type call struct {
	done  chan struct{}
	pokes int
	res   Result
	err   error
}

// NewCoalescer returns a Coalescer around run.
func NewCoalescer(run func(context.Context) (Result, error)) *Coalescer {
	idle := make(chan struct{})
	close(idle)
	return &Coalescer{run: run, base: context.Background(), idle: idle}
}

// OnPoked sets the function that receives the result of each reconcile that
// served a poke; set it before the first Poke.
func (c *Coalescer) OnPoked(f func(Result, error)) { c.onPoked = f }

// Follow makes f follow every reconcile up (see FollowUp): the coalescer
// pokes itself while a result says servers wait, or after a failure.
// followed, when set, is told of each such poke. Set it before the first
// call.
//
// With more than one target that has a check reader, a passed check asks
// for a reconcile of its target alone, in a lane of that target's (shared
// the same way), so that another target that hangs does not hold it back.
func (c *Coalescer) Follow(f *FollowUp, followed func(reason string, coalesced bool)) {
	c.follow, c.followed = f, followed
	if len(f.Checks) > 1 {
		f.Enter = c.pokeTarget
	}
}

// pokeTarget asks target's lane for a reconcile of that target alone.
func (c *Coalescer) pokeTarget(target string) {
	coalesced := c.lane(target).Poke()
	if c.followed != nil {
		c.followed("a waiting server passed its check on "+target, coalesced)
	}
}

// lane returns target's lane, made on first use: a Coalescer of its own
// whose reconciles are that target's alone.
func (c *Coalescer) lane(target string) *Coalescer {
	c.mu.Lock()
	defer c.mu.Unlock()
	lane := c.lanes[target]
	if lane == nil {
		lane = NewCoalescer(func(ctx context.Context) (Result, error) { return c.run(OnlyTarget(ctx, target)) })
		lane.base = c.base
		lane.onPoked = func(res Result, err error) {
			c.follow.ObserveTarget(target, res, err)
			if c.onPoked != nil {
				c.onPoked(res, err)
			}
		}
		if c.lanes == nil {
			c.lanes = map[string]*Coalescer{}
		}
		c.lanes[target] = lane
	}
	return lane
}

// Do waits for a reconcile that starts after the call and returns its result.
// The reconcile is not cancelled when ctx is: other callers may share it.
// When ctx ends first the error is a *LateError, which says how the
// reconcile the caller waited behind ended, if it did.
func (c *Coalescer) Do(ctx context.Context) (Result, error) {
	cl, _, before := c.enqueue(ctx, false)
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		late := &LateError{Err: ctx.Err()}
		if before != nil {
			select {
			case <-before.done:
				late.Before, late.BeforeErr = &before.res, before.err
			default:
			}
		}
		return Result{}, late
	}
}

// LateError is a caller's wait that ended before its reconcile did. A
// caller that came while a reconcile ran waits for that one to end, then
// for its own: Before is how the first one ended (nil when it had not, or
// none ran), which is usually why the caller's own did not end in time (a
// target that does not answer holds each reconcile until its timeout).
type LateError struct {
	Err       error // the caller's context's
	Before    *Result
	BeforeErr error
}

func (e *LateError) Error() string {
	if e.Before == nil {
		return "the reconcile did not end in time"
	}
	if e.BeforeErr == nil {
		return "the reconcile did not end in time; the one before it ended " + e.Before.Status
	}
	return "the reconcile did not end in time; the one before it failed: " + e.BeforeErr.Error()
}

func (e *LateError) Unwrap() error { return e.Err }

// Poke asks for a reconcile that starts after the call, without waiting for
// it. It reports whether the poke joined a reconcile already waiting to start
// (coalesced): then it cost nothing.
//
// With several targets followed up (Follow), a poke that finds a reconcile
// running also asks each target's lane for a reconcile of its own: the
// running one may be held by a target that hangs until the reconcile
// timeout, and the change (a new pod, a pod gone) must reach the others now.
// A target's reconciles never overlap (the Reconciler's lock per target), so
// a lane waits only for its own target.
func (c *Coalescer) Poke() (coalesced bool) {
	_, coalesced, before := c.enqueue(c.base, true)
	if before != nil && c.follow != nil && c.follow.Enter != nil {
		for _, target := range slices.Sorted(maps.Keys(c.follow.Checks)) {
			c.lane(target).Poke()
		}
	}
	return coalesced
}

// enqueue joins the call waiting to start, or makes it, and reports whether
// one was already waiting; before is the call running now, if any.
func (c *Coalescer) enqueue(ctx context.Context, poke bool) (cl *call, joined bool, before *call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before = c.current
	joined = c.next != nil
	if !joined {
		c.next = &call{done: make(chan struct{})}
	}
	cl = c.next
	if poke {
		cl.pokes++
	}
	if !c.running {
		c.running = true
		c.idle = make(chan struct{})
		go c.loop(context.WithoutCancel(ctx))
	}
	return cl, joined, before
}

// Idle returns a channel closed once no reconcile runs or waits to run, its
// lanes' included: what a shutdown waits for, so that a poked reconcile is
// not cut in the middle.
func (c *Coalescer) Idle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lanes) == 0 {
		return c.idle
	}
	waits := []<-chan struct{}{c.idle}
	for _, lane := range c.lanes {
		waits = append(waits, lane.Idle())
	}
	all := make(chan struct{})
	go func() {
		for _, w := range waits {
			<-w
		}
		close(all)
	}()
	return all
}

func (c *Coalescer) loop(ctx context.Context) {
	for {
		c.mu.Lock()
		cl := c.next
		c.next = nil
		c.current = cl
		if cl == nil {
			c.running = false
			close(c.idle)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		run := ctx
		if c.follow != nil && c.follow.Enter != nil {
			// Each target's waiting servers are watched as soon as it is
			// done, while another may still hang.
			run = WithTargetDone(ctx, func(target string, trs []TargetResult) {
				c.follow.ObserveTarget(target, Result{Targets: trs}, nil)
			})
		}
		cl.res, cl.err = c.safeRun(run)
		if c.follow != nil {
			c.follow.Observe(cl.res, cl.err, c.pokeAgain)
		}
		close(cl.done)
		if cl.pokes > 0 && c.onPoked != nil {
			c.onPoked(cl.res, cl.err)
		}
	}
}

// pokeAgain is the follow-up's poke.
func (c *Coalescer) pokeAgain(reason string) {
	coalesced := c.Poke()
	if c.followed != nil {
		c.followed(reason, coalesced)
	}
}

// PanicError is a reconcile that panicked: a bug. The process goes on
// serving; the callers get the error.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("reconcile panicked: %v", e.Value) }

// safeRun runs one reconcile, turning a panic into a *PanicError: it runs in
// the coalescer's goroutine, where nothing else would recover it.
func (c *Coalescer) safeRun(ctx context.Context) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, err = Result{Status: StatusError}, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return c.run(ctx)
}
