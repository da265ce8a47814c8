package reconcile

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// CheckReader reads, from one running HAProxy, the servers of a backend it
// runs and, for each, where its check stands: a reconcile has work for a
// waiting server whose check passed, or of which no check runs at all
// (paused: a reload loaded it parked, or another writer parked it; it must
// be gated again). One read of the runtime socket, no Kubernetes read and no
// configuration read, so it can be asked often while servers wait.
type CheckReader interface {
	ReadChecks(ctx context.Context, backend string) (map[string]model.CheckState, error)
}

// FollowUp reconciles again when nothing in Kubernetes will ask for it:
//
//   - while servers wait for their first passed check, it reads their
//     target's checks every Poll and asks for a reconcile as soon as one
//     passed, so a server enters service within a Poll of its check passing;
//     a target with no CheckReader gets a reconcile every Slow instead; one
//     found gone asks at once, but gone again (another writer deletes it)
//     only after a backoff (contested.go);
//   - while unwanted servers wait for their sessions to end, every Drain;
//   - after a reconcile whose deletion guard parked servers, or that kept
//     servers until their replacement (a zone role change) is in service,
//     once after Drain: the guard deletes them only when a later read of
//     Kubernetes confirms they are unwanted, and nothing else may ask for
//     that read;
//   - after a failed reconcile, after Retry, doubling up to MaxRetry while
//     failures go on, so a target that was down is repaired when it is back
//     even if nobody pokes;
//   - while pods that list the readiness gate wait for their containers,
//     every Starting (Slow after Patience): their becoming ready changes no
//     EndpointSlice, as the gate keeps them not Ready.
//
// Each target is watched by itself: a dead or slow target does not delay
// the poke another target's passed check asks for, and with Enter set, the
// reconcile that puts the server in service is that target's alone, so a
// target that hangs does not hold it back either. A newer whole result
// replaces the timers an older one started; a timer that fires asks for a
// whole reconcile and stops only the other timers of its result. What
// watches a target's waiting servers (its check polls, or a timer) is
// replaced only by a newer word on that target: its own result
// (ObserveTarget, told by a whole reconcile too as soon as that target is
// done), or a whole result when none of its own came since the last whole
// one. So a whole reconcile that hangs on one target until its timeout
// neither stops another target's polls (a retry, drain or hand-over timer
// left by the last result that fires meanwhile) nor, when it ends at last,
// replaces them by its older word on that target. A target whose reconcile
// failed (other than HAProxy refusing single servers) is not polled: the
// retry after a failure covers it, with its backoff.
//
// Patience is each server's, counted from the first result that listed it
// waiting: a target's checks are polled every Poll while any of its waiting
// servers has waited Patience or less, and only once all have waited longer
// does it get a reconcile every Slow instead, so a server whose check never
// passes does not slow down one that begins to wait after it. Servers
// waiting for their sessions to end likewise: every Drain while any of them
// is within its patience, then every Slow. Gated pods and hand-overs look
// every Slow once they have gone on past Patience.
type FollowUp struct {
	// Checks are the targets' check readers, by Driver.Name.
	Checks map[string]CheckReader
	// Enter, when set, reconciles one target by itself (its result comes
	// back through ObserveTarget): what a passed check on that target asks
	// for. Nil: a whole reconcile, through the poke.
	Enter func(target string)
	// Poll, Slow, Patience, Drain, Retry, MaxRetry and Starting: see the
	// type doc; zero takes 50ms, 10s, 2m, 1s, 1s, 30s and 1s.
	Poll, Slow, Patience, Drain, Retry, MaxRetry, Starting time.Duration
	// AfterFunc and Now are the clock; nil takes package time's.
	AfterFunc func(time.Duration, func()) (stop func() bool)
	Now       func() time.Time
	// Log, when set, is told of servers another writer deletes (contested);
	// OnContested, when set, of each poll that finds contested servers
	// (backend/server) on target. It must not call into the FollowUp.
	Log         *slog.Logger
	OnContested func(target string, servers []string)

	mu      sync.Mutex
	poke    func(reason string)
	stops   []func() bool     // the timers the latest whole result started
	watches map[string]func() // what watches a target's waiting servers: its check polls, or a timer
	// observed: the targets whose own result (ObserveTarget) came since
	// the last whole one; that whole one's word on them is older.
	observed map[string]bool
	// The patience is each server's (see next): when each began to wait
	// for its check, and for its sessions to end.
	waitingSince  map[serverKey]time.Time
	drainingSince map[serverKey]time.Time
	starting      time.Time // when gated pods began to wait for their containers
	handover      time.Time // when servers began to be kept until their replacement serves
	guarding      time.Time // when the guard began to hold servers an earlier reconcile parked
	failures      int       // consecutive failed reconciles
	// vanished: waiting servers a poll found gone, how often in a row
	// and when last (contested).
	vanished map[serverKey]vanish
	stopped  bool
}

func (f *FollowUp) dur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (f *FollowUp) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *FollowUp) after(d time.Duration, fn func()) func() bool {
	if f.AfterFunc != nil {
		return f.AfterFunc(d, fn)
	}
	return time.AfterFunc(d, fn).Stop
}

// Observe is told every whole reconcile's result; it replaces the timers
// the previous one started, and what watches the targets whose own result
// (ObserveTarget) did not come since that one. poke asks for a reconcile.
func (f *FollowUp) Observe(res Result, err error, poke func(reason string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reset()
	if f.stopped {
		return
	}
	f.poke = poke
	now := f.now()
	if err != nil {
		f.failures++
	} else {
		f.failures = 0
	}
	if f.failures > 0 {
		d := f.dur(f.Retry, time.Second)
		for i := 1; i < f.failures && d < f.dur(f.MaxRetry, 30*time.Second); i++ {
			d *= 2
		}
		d = min(d, f.dur(f.MaxRetry, 30*time.Second))
		f.stops = append(f.stops, f.after(d, func() { f.fire("retry after a failure") }))
	}
	// A target's own result that came during this reconcile (as soon as
	// that target was done) or after it (a reconcile of that target alone)
	// is as new as this one's word on it, or newer: this reconcile may
	// have hung on another target until its timeout meanwhile. Such a
	// target's watch stays as its own result set it.
	var fresh []TargetResult
	for _, t := range res.Targets {
		if !f.observed[t.Target] {
			fresh = append(fresh, t)
		}
	}
	for target := range f.watches {
		if !f.observed[target] {
			f.unwatch(target)
		}
	}
	f.waitingSince = since(f.waitingSince, now, res.Targets, waitingOf, func(target string) bool { return f.observed[target] })
	f.forget()
	f.observed = nil
	for target, backends := range waitingByTarget(Result{Targets: fresh}) {
		f.watch(target, backends)
	}
	if !res.podsStarting {
		f.starting = time.Time{}
	} else {
		d := f.paced(&f.starting, f.dur(f.Starting, time.Second))
		f.stops = append(f.stops, f.after(d, func() { f.fire("pods wait for their containers (readiness gate)") }))
	}
	f.drainingSince = since(f.drainingSince, now, res.Targets, drainingOf, nil)
	if res.draining() {
		// A long-lived session: no need to ask every second for its life;
		// a server removed since is asked about every Drain all the same.
		d := f.pace(sinceOf(f.drainingSince, now, listed(res.Targets, drainingOf)), f.dur(f.Drain, time.Second))
		f.stops = append(f.stops, f.after(d, func() { f.fire("servers wait for their sessions to end") }))
	}
	if !res.handingOver() {
		f.handover = time.Time{}
	}
	if !res.guardHolds() {
		f.guarding = time.Time{}
	}
	if !res.draining() && (res.guardParked() || res.guardHolds() || res.handingOver()) {
		// Kept until a replacement serves, which may take long (a check
		// that never passes): every Drain, every Slow past Patience. A
		// guard that holds what an earlier reconcile parked is looked at
		// again too: a replacement put in service without a wait for its
		// check (a not-ready pod ready again) is UP at the next read, and
		// nothing else would ask for it (found by the history checker,
		// seed 32: parked for good beside a refused server).
		d := f.dur(f.Drain, time.Second)
		switch {
		case res.handingOver():
			d = f.paced(&f.handover, d)
		case !res.guardParked():
			d = f.paced(&f.guarding, d)
		}
		f.stops = append(f.stops, f.after(d, func() { f.fire("guarded servers wait for a confirming read") }))
	}
}

// paced returns how long to wait before looking again at a wait that has
// gone on since *at (now, when it is zero): d, or Slow past Patience.
// f.mu is held.
func (f *FollowUp) paced(at *time.Time, d time.Duration) time.Duration {
	if at.IsZero() {
		*at = f.now()
	}
	return f.pace([]time.Time{*at}, d)
}

// pace is next on f's clock, with its Slow and Patience: step while any of
// the waits that began at the times given is within its patience.
func (f *FollowUp) pace(began []time.Time, step time.Duration) time.Duration {
	return next(f.now(), began, step, f.dur(f.Slow, 10*time.Second), f.dur(f.Patience, 2*time.Minute))
}

// ObserveTarget is told the result of a reconcile of target alone (Enter),
// or target's part of a whole reconcile as soon as target is done
// (WithTargetDone); it replaces what watches target's waiting servers, and
// the next whole result leaves that as it is. A failure there asks for a
// whole reconcile after Retry.
func (f *FollowUp) ObserveTarget(target string, res Result, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.unwatch(target)
	if f.observed == nil {
		f.observed = map[string]bool{}
	}
	f.observed[target] = true
	switch {
	case err != nil:
		f.stops = append(f.stops, f.after(f.dur(f.Retry, time.Second), func() { f.fire("retry after a failure") }))
	case res.gateDeferred:
		// A pod's gate needs every target's view: a whole reconcile sets it.
		f.stops = append(f.stops, f.after(0, func() { f.fire("the readiness gate needs every target") }))
	}
	var own []TargetResult
	for _, t := range res.Targets {
		if t.Target == target {
			own = append(own, t)
		}
	}
	f.waitingSince = since(f.waitingSince, f.now(), own, waitingOf, func(t string) bool { return t != target })
	f.forget()
	if backends := waitingByTarget(Result{Targets: own})[target]; len(backends) > 0 {
		f.watch(target, backends)
	}
}

// watch starts what brings target's waiting servers (backend → names) into
// service: polls of its checks every Poll while any of them is within its
// patience, or once all are past it (or with no check reader) a reconcile
// after Slow. f.mu is held.
func (f *FollowUp) watch(target string, backends map[string]waits) {
	if f.watches == nil {
		f.watches = map[string]func(){}
	}
	var servers []serverKey
	for backend, w := range backends {
		for _, n := range w.waiting {
			servers = append(servers, serverKey{target, backend, n})
		}
	}
	poll := f.dur(f.Poll, 50*time.Millisecond)
	cr := f.Checks[target]
	if cr == nil || f.pace(sinceOf(f.waitingSince, f.now(), servers), poll) != poll {
		stop := f.after(f.dur(f.Slow, 10*time.Second), func() { f.fire("servers wait for their check") })
		f.watches[target] = func() { stop() }
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.watches[target] = cancel
	f.pollChecks(ctx, target, cr, backends, poll)
}

// unwatch stops what watches target's waiting servers; f.mu is held.
func (f *FollowUp) unwatch(target string) {
	if stop := f.watches[target]; stop != nil {
		stop()
		delete(f.watches, target)
	}
}

// pollChecks reads cr's checks every poll until a server in backends (name
// → waiting servers) passed its check, then asks for target's reconcile. A
// failed read is tried again at the next poll: a target that cannot be read
// is one whose reconcile failed, and the retry covers it. Cancelling ctx (a
// newer result, Stop) ends the polls: a tick still pending returns at once.
func (f *FollowUp) pollChecks(ctx context.Context, target string, cr CheckReader, backends map[string]waits, poll time.Duration) {
	var tick func()
	waited := false
	// seen: backend/server found gone by this watch already (counted once
	// a watch: a burst's extra poll sees the same deletion again); held:
	// those of them contested, held back (contested.go).
	seen, held := map[string]bool{}, map[string]bool{}
	retrying := false // their reconcile is asked for after a backoff
	tick = func() {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		due, of, gone := dueCount(rctx, cr, backends)
		cancel()
		if ctx.Err() != nil {
			return // a newer result came meanwhile: this reading is its watch's
		}
		fresh := map[string][]string{}
		holding := 0
		for backend, names := range gone {
			for _, n := range names {
				switch k := backend + "/" + n; {
				case held[k]:
					holding++
				case !seen[k]:
					seen[k] = true
					fresh[backend] = append(fresh[backend], n)
				}
			}
		}
		again, wait := f.contested(target, fresh)
		for _, k := range again {
			held[k] = true
		}
		holding += len(again)
		due, of = due-holding, of-holding
		if len(again) > 0 && !retrying {
			retrying = true
			f.after(wait, func() {
				if ctx.Err() == nil { // else a newer result watches them
					f.enter(ctx, target)
				}
			})
		}
		switch {
		case due == 0:
		case due < of && (due > 1 || of > 2) && !waited:
			// Part of a burst is due: the rest, added with it, passes
			// within a poll or so. One more poll lets one reconcile put
			// them all in service, where a second would wait for the
			// first one's write (on the real Data Plane API a transaction
			// costs ~7 ms a server: 150 of 200 made the other 50 wait
			// 0.7 s more). A rollout's step (one server due, one other
			// waiting at most) goes at once.
			waited = true
		default:
			f.enter(ctx, target)
			return
		}
		f.after(poll, tick)
	}
	f.after(poll, tick)
}

// enter asks for the reconcile a passed check on target calls for: target's
// own with Enter, else a whole one.
func (f *FollowUp) enter(ctx context.Context, target string) {
	f.mu.Lock()
	if f.Enter == nil {
		f.mu.Unlock()
		f.fire("a waiting server passed its check")
		return
	}
	if f.stopped || ctx.Err() != nil {
		f.mu.Unlock()
		return
	}
	f.unwatch(target) // until the target's result says what waits
	enter := f.Enter
	f.mu.Unlock()
	enter(target)
}

// fire pokes, unless a newer result or Stop came first (then what was
// started is gone already). The targets' check polls go on: the whole
// reconcile asked for may wait behind one that hangs on a target, and
// another target's passed check must still ask for its entry meanwhile.
func (f *FollowUp) fire(reason string) {
	f.mu.Lock()
	poke := f.poke
	if f.stopped || poke == nil {
		f.mu.Unlock()
		return
	}
	f.reset()
	f.mu.Unlock()
	poke(reason)
}

// reset stops the timers the latest whole result started, not the
// targets' watches (see fire); f.mu is held.
func (f *FollowUp) reset() {
	for _, stop := range f.stops {
		stop()
	}
	f.stops = nil
}

// Stop ends every follow-up, for good.
func (f *FollowUp) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	f.reset()
	for target := range f.watches {
		f.unwatch(target)
	}
}

// waits are a backend's servers waiting for their check (TargetResult's
// Waiting), with those a reload is still to load (Loading) among them.
type waits struct {
	waiting []string
	loading map[string]bool
}

// waitingByTarget returns the servers res lists as waiting for their check,
// by target and backend, leaving out the backends whose reconcile failed
// other than by HAProxy refusing single servers (their Waiting lists no
// refused one): the retry after a failure comes for those, with its backoff,
// where polling would ask again every Poll for what cannot be done.
func waitingByTarget(res Result) map[string]map[string]waits {
	out := map[string]map[string]waits{}
	for _, t := range res.Targets {
		if len(t.Waiting) == 0 || t.Error != "" && len(t.Failed) == 0 {
			continue
		}
		if out[t.Target] == nil {
			out[t.Target] = map[string]waits{}
		}
		w := out[t.Target][t.Backend]
		w.waiting = append(w.waiting, t.Waiting...)
		for _, n := range t.Loading {
			if w.loading == nil {
				w.loading = map[string]bool{}
			}
			w.loading[n] = true
		}
		out[t.Target][t.Backend] = w
	}
	return out
}

// guardParked reports whether this reconcile parked servers the deletion
// guard holds: they go only when a later reconcile confirms it.
func (r Result) guardParked() bool {
	for _, t := range r.Targets {
		for _, g := range t.Guarded {
			if slices.Contains(t.Maint, g) {
				return true
			}
		}
	}
	return false
}

// guardHolds reports whether the guard keeps servers parked.
func (r Result) guardHolds() bool {
	for _, t := range r.Targets {
		if len(t.Guarded) > 0 {
			return true
		}
	}
	return false
}

// handingOver reports whether servers are kept until their replacement (a
// zone role change) is in service.
func (r Result) handingOver() bool {
	for _, t := range r.Targets {
		if len(t.HandingOver) > 0 {
			return true
		}
	}
	return false
}

func (r Result) draining() bool {
	for _, t := range r.Targets {
		if len(t.Draining) > 0 {
			return true
		}
	}
	return false
}

// dueCount counts, on cr, the servers of backends (their waiting servers)
// that a reconcile has work for, of all those waiting in the backends it
// could read: due (its check
// passed, or none runs: CheckReader), or gone or parked at runtime
// (listed in gone too, by backend: undone by a reload or by another
// writer), or, when a reload was to load it (Loading), there now. A backend
// that cannot be read says nothing.
//
// Parked at runtime counts as gone (soak seed 188303918 on 3.0.11,
// nodes-soak, runtime: a one-shot run of the old HAPROXY_LOCAL_ZONE beside
// serve of the new one; serve's guard parked the run's servers, the run
// gated them again at once and deleted serve's, 212 times in 50 s, the
// local zone's Node out of traffic for 16 s): two writers that park each
// other's servers are contested as two that delete them are. A server
// haproxy.cfg holds "disabled" found parked does not count: the Data Plane
// driver's own reloads load its waiting servers so (second reader).
func dueCount(ctx context.Context, cr CheckReader, backends map[string]waits) (due, of int, gone map[string][]string) {
	for backend, w := range backends {
		got, err := cr.ReadChecks(ctx, backend)
		if err != nil {
			continue
		}
		of += len(w.waiting)
		for _, n := range w.waiting {
			st, there := got[n]
			if w.loading[n] && there || !w.loading[n] && (st != model.CheckPending || !there) {
				due++
			}
			if (!there || st == model.CheckParked) && !w.loading[n] {
				if gone == nil {
					gone = map[string][]string{}
				}
				gone[backend] = append(gone[backend], n)
			}
		}
	}
	return due, of, gone
}
