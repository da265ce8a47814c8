// Package reloads notices HAProxy reloads the service did not cause — a
// certificate renewal, config management, systemctl reload — so that a
// reconcile puts back at once what the reload dropped: every server the
// runtime API driver added (a reload starts a worker from haproxy.cfg alone),
// and what the Data Plane API driver holds only in the running HAProxy. No
// Kubernetes change would ask for that reconcile, and a backend could stay
// without its servers until one did.
//
// Each target's runtime socket is asked which worker answers ("show info":
// its pid and start time) every Interval; a new one is a reload (or a
// restart). One small command per target and Interval: cheaper and surer
// than a long-lived connection, whose fate across a reload differs between
// versions, and it needs no master socket.
package reloads

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Process is a target's runtime socket, as Watcher asks it.
type Process interface {
	// Process identifies the worker that answers; a reload changes it.
	Process(ctx context.Context) (string, error)
}

// DefaultInterval is how often each target is asked: a reload costs the
// runtime driver this much more than the returning servers' checks.
const DefaultInterval = 250 * time.Millisecond

// BackAfter is how many looks in a row must have failed for a target that
// answers again to be poked (1 s at DefaultInterval): a look that fails
// now and then (a reload under way) is no outage.
const BackAfter = 4

// Watcher watches targets' workers and pokes on a new one, and on one
// that answers again after BackAfter failed looks.
type Watcher struct {
	// Targets are the runtime sockets, by target name (Driver.Name).
	Targets map[string]Process
	// Interval between two looks; zero takes DefaultInterval.
	Interval time.Duration
	// Poke is called with the target's name when its worker changed, or
	// when it answers again after an outage.
	Poke func(target string)
	Log  *slog.Logger
}

// Run watches every target until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for name, p := range w.Targets {
		wg.Go(func() { w.watch(ctx, name, p) })
	}
	wg.Wait()
}

func (w *Watcher) watch(ctx context.Context, name string, p Process) {
	every := w.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last string
	failed := 0 // looks in a row that failed
	for {
		// A hung socket must not stop the looks: each has its own deadline.
		rctx, cancel := context.WithTimeout(ctx, 4*every)
		id, err := p.Process(rctx)
		cancel()
		if err != nil {
			failed++
		} else {
			switch {
			case Changed(last, id):
				if w.Log != nil {
					w.Log.Info("HAProxy reloaded: reconciling", "target", name, "worker", id, "before", last)
				}
				w.Poke(name)
			case failed >= BackAfter && last != "":
				// Unreachable for a while (its host, its socket): what
				// changed meanwhile is carried now, not at the follow-up's
				// next retry, which backs off up to 30 s.
				if w.Log != nil {
					w.Log.Info("HAProxy reachable again: reconciling", "target", name, "worker", id, "failedLooks", failed)
				}
				w.Poke(name)
			}
			last, failed = id, 0
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Changed reports whether the worker now answering (cur) is a new one: not
// the first seen (the first reconcile covers whatever came before), and not
// the one seen last. A failed look keeps the last one seen: a worker that
// comes back after the socket was unreachable is compared with it.
func Changed(last, cur string) bool { return last != "" && cur != last }
