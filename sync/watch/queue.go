package watch

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AllServices is the key of a full reconcile (every selected Service): what
// a watch restart, a Node change or an overflowing queue asks for. It is no
// valid Service key.
const AllServices = "*"

// leftKey is the queue's work item that hands the left backends over; no
// Service key can equal it.
const leftKey = "\x00left"

// Default bounds of a Queue.
const (
	// DefaultConcurrency bounds the reconciles run at once.
	DefaultConcurrency = 4
	// DefaultMaxKeys bounds the Services waiting; past it the waiting keys
	// are dropped for one full reconcile, and so are left backends past it.
	DefaultMaxKeys = 4096
)

// Queue coalesces pokes per Service key: a key poked while it waits is
// queued once; a key poked while its reconcile runs is run once more after
// it (the run may have read before the change), however many pokes came.
// Different keys run at once, up to Concurrency. Pokes never block.
//
// Everything poked comes from Kubernetes, so it is bounded: invalid keys are
// refused; past MaxKeys waiting keys, they are all dropped for one full
// reconcile (AllServices), which covers them. A full reconcile that starts
// also covers every key still waiting: they are dropped.
//
// Left backends (those a Service named and names no more) are gathered and
// handed over in one call to left, run like a key.
type Queue struct {
	run         func(ctx context.Context, key string)
	left        func(ctx context.Context, backends []string)
	concurrency int
	maxKeys     int
	log         *slog.Logger

	mu      sync.Mutex
	queue   []string        // waiting keys, in poke order
	waiting map[string]bool // the keys in queue
	running map[string]bool
	again   map[string]bool // poked while running: run once more
	gone    map[string]bool // left backends not yet handed over
	wake    chan struct{}
}

// QueueLimits bound a Queue's work (0: the defaults).
type QueueLimits struct {
	Concurrency int
	MaxKeys     int
}

// NewQueue returns a Queue that runs run for each poked key (AllServices for
// a full reconcile) and left for backends that left. Start it with Run.
func NewQueue(run func(ctx context.Context, key string), left func(ctx context.Context, backends []string), lim QueueLimits, log *slog.Logger) *Queue {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Queue{
		run: run, left: left, log: log,
		concurrency: cmp.Or(lim.Concurrency, DefaultConcurrency),
		maxKeys:     cmp.Or(lim.MaxKeys, DefaultMaxKeys),
		waiting:     map[string]bool{}, running: map[string]bool{}, again: map[string]bool{}, gone: map[string]bool{},
		wake: make(chan struct{}, 1),
	}
}

// ValidKey reports whether key is "namespace/name", both DNS labels, as
// every Service's is.
func ValidKey(key string) bool {
	ns, name, ok := strings.Cut(key, "/")
	return ok && len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Label(name)) == 0
}

// Poke asks for a reconcile of the Service key ("namespace/name"); it
// reports false for an invalid key, which is dropped.
func (q *Queue) Poke(key string) bool {
	if !ValidKey(key) {
		q.log.Debug("poke of an invalid service key dropped", "key", fmt.Sprintf("%.100q", key))
		return false
	}
	q.add(key)
	return true
}

// PokeAll asks for a full reconcile; reason is logged.
func (q *Queue) PokeAll(reason string) {
	q.log.Debug("full reconcile asked", "reason", reason)
	q.add(AllServices)
}

// Left hands over backends that a Service named and names no more.
func (q *Queue) Left(backends []string) {
	q.mu.Lock()
	dropped := 0
	for _, b := range backends {
		if len(q.gone) >= q.maxKeys && !q.gone[b] {
			dropped++
			continue
		}
		q.gone[b] = true
	}
	q.mu.Unlock()
	if dropped > 0 {
		q.log.Error("too many left backends waiting; some dropped (their servers stay until a Service names them again)", "dropped", dropped, "limit", q.maxKeys)
	}
	q.add(leftKey)
}

func (q *Queue) add(key string) {
	q.mu.Lock()
	switch {
	case q.waiting[key]:
	case q.running[key]:
		q.again[key] = true
	default:
		q.queue = append(q.queue, key)
		q.waiting[key] = true
	}
	if over := len(q.queue) + len(q.again); over > q.maxKeys {
		q.overflow()
		q.log.Warn("too many services waiting for a reconcile; one full reconcile instead", "waiting", over, "limit", q.maxKeys)
	}
	q.mu.Unlock()
	q.signal()
}

// overflow drops every waiting Service key for one full reconcile. Call
// with mu held.
func (q *Queue) overflow() {
	left := q.waiting[leftKey]
	clear(q.queue)
	q.queue = q.queue[:0]
	clear(q.waiting)
	clear(q.again)
	for _, k := range []string{AllServices, leftKey} {
		if k == leftKey && !left {
			continue
		}
		if q.running[k] {
			q.again[k] = true
		} else {
			q.queue = append(q.queue, k)
			q.waiting[k] = true
		}
	}
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run runs the poked work until ctx is done.
func (q *Queue) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range q.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if key, ok := q.take(); ok {
					q.do(ctx, key)
					continue
				}
				select {
				case <-ctx.Done():
					return
				case <-q.wake:
				}
			}
		}()
	}
	wg.Wait()
}

// take pops the next waiting key and marks it running.
func (q *Queue) take() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		return "", false
	}
	key := q.queue[0]
	q.queue = q.queue[1:]
	delete(q.waiting, key)
	q.running[key] = true
	if key == AllServices {
		// The full reconcile starts now: it reads every Service after
		// the pokes still waiting.
		q.queue = slices.DeleteFunc(q.queue, func(k string) bool {
			drop := k != leftKey
			if drop {
				delete(q.waiting, k)
			}
			return drop
		})
	}
	if len(q.queue) > 0 {
		q.signal() // another worker may take the next one
	}
	return key, true
}

func (q *Queue) do(ctx context.Context, key string) {
	defer func() {
		if v := recover(); v != nil {
			q.log.Error("panic in a poked reconcile", "key", key, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
		q.mu.Lock()
		delete(q.running, key)
		if q.again[key] {
			delete(q.again, key)
			q.queue = append(q.queue, key)
			q.waiting[key] = true
		}
		q.mu.Unlock()
		q.signal()
	}()
	if ctx.Err() != nil {
		return
	}
	if key != leftKey {
		q.run(ctx, key)
		return
	}
	q.mu.Lock()
	backends := make([]string, 0, len(q.gone))
	for b := range q.gone {
		backends = append(backends, b)
	}
	clear(q.gone)
	q.mu.Unlock()
	if len(backends) > 0 && q.left != nil {
		slices.Sort(backends)
		q.left(ctx, backends)
	}
}
