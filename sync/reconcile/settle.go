package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Settler runs what the one-shot reconcile command runs, so that what it
// started is finished when it exits: a removed server is parked first and
// deleted by a later reconcile once its sessions ended, and a new server is
// gated until its check passed, then put in service by a later one.
//
//  1. One whole reconcile of every target.
//  2. Each target is then followed on its own, from the moment the whole
//     reconcile is done with it (WithTargetDone), while another target may
//     still hang: while servers wait there for their first passed check or
//     for their sessions to end, its checks are read every Poll (FollowUp),
//     and a reconcile of that target alone (OnlyTarget) runs as soon as one
//     passed, at least every second.
//  3. A target whose reconcile failed (other than by HAProxy refusing
//     single servers, the rest applied) is neither followed nor tried again:
//     trying again is the caller's, later (a CronJob's next run). So a target
//     down or hung holds back nothing on the others, as with serve's
//     follow-up (FollowUp with Enter): their gated servers enter service
//     and their parked ones are deleted all the same.
//  4. With the readiness gate on, a reconcile of one target leaves the gate
//     as it was (it needs every target's view): when every target
//     succeeded, one more whole reconcile sets it.
//
// It ends when no target it follows has work left, or when ctx ends.
type Settler struct {
	// Run runs one reconcile: of every target, or of the one ctx names
	// (OnlyTarget).
	Run func(context.Context) (Result, error)
	// Checks are the targets' check readers, by Driver.Name.
	Checks map[string]CheckReader
	// Poll is how often waiting servers' checks are read; zero takes
	// FollowUp's.
	Poll time.Duration
	// Waits, when set, is told once of each target where servers wait for
	// their check or their sessions, with that target's results, as soon as
	// it is done: a run that waits silently looks hung. It may be called
	// from several goroutines at once.
	Waits func(target string, results []TargetResult)
	// Log, when set, is told of servers another writer deletes
	// (FollowUp.Log).
	Log *slog.Logger
}

// followed is what following one target left.
type followed struct {
	results []TargetResult // its backends', merged over its reconciles
	applied bool           // one of its own reconciles changed something
	// waiting: ctx ended with servers still waiting for their check.
	waiting bool
	// gateDeferred: one of its own reconciles changed servers while the
	// readiness gate is on.
	gateDeferred bool
	// contested: another writer deleted what it added, twice; not
	// followed further.
	contested bool
}

// Settle runs the reconciles and returns their result, together: each
// target's lists hold what any of its reconciles did, its attempts add up,
// and its waiting, guarded, capped, draining and server counts are the last
// one's. The error is nil when every target succeeded and no server still
// waits for its check; else it wraps ErrTargets, naming each failed target
// with its class, and ErrStillWaiting when ctx ended with servers still
// waiting for their check (on targets that did not fail). Servers still
// draining then are no error: their sessions are the clients' to end, and
// the result lists them. A failure of the whole first reconcile other than
// its targets' (Kubernetes could not be read: nothing was written) is
// returned as it is.
func (s *Settler) Settle(ctx context.Context) (Result, error) {
	start := time.Now()
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		started = map[string]bool{}
		out     = map[string]followed{}
	)
	follow := func(target string, results []TargetResult) {
		mu.Lock()
		defer mu.Unlock()
		if started[target] {
			return
		}
		started[target] = true
		wg.Go(func() {
			f := s.follow(ctx, target, results)
			mu.Lock()
			out[target] = f
			mu.Unlock()
		})
	}
	res, err := s.Run(WithTargetDone(ctx, follow))
	// A target the reconcile did not tell of (it could not take the
	// target's lock, or the Runner does not tell) is followed from here.
	order := targetNames(res.Targets)
	for _, target := range order {
		follow(target, slices.DeleteFunc(slices.Clone(res.Targets), func(t TargetResult) bool { return t.Target != target }))
	}
	wg.Wait()
	if err != nil && !errors.Is(err, ErrTargets) {
		return res, err
	}

	// A whole reconcile that failed on a target says "error" whatever it
	// applied elsewhere: the targets' own results say what changed.
	applied, stillWaiting, gateDeferred, contested := res.Status == StatusApplied, false, false, false
	res.Targets = make([]TargetResult, 0, len(res.Targets))
	for _, target := range order {
		f := out[target]
		res.Targets = append(res.Targets, f.results...)
		applied = applied || f.applied
		stillWaiting = stillWaiting || f.waiting
		gateDeferred = gateDeferred || f.gateDeferred
		contested = contested || f.contested
	}
	if gateDeferred && !stillWaiting && !contested && ctx.Err() == nil && len(failedTargets(res.Targets)) == 0 {
		next, _ := s.Run(ctx)
		res.Targets = mergedTargets(res.Targets, next.Targets)
		applied = applied || next.Status == StatusApplied
	}
	res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	res.Status, res.Error, res.ErrorClass = StatusUnchanged, "", ""
	if applied || slices.ContainsFunc(res.Targets, func(t TargetResult) bool { return t.changed }) {
		res.Status = StatusApplied
	}
	err = settleError(res.Targets, stillWaiting, contested)
	if err != nil {
		res.Status, res.Error = StatusError, err.Error()
		if errors.Is(err, ErrTargets) {
			res.ErrorClass = leastHopeful(res.Targets, err)
		}
	}
	return res, err
}

// follow runs reconciles of target alone while its results say servers
// wait there (pending), starting from results, its part of the whole
// reconcile.
func (s *Settler) follow(ctx context.Context, target string, results []TargetResult) followed {
	out := followed{results: results}
	if !pending(results) {
		return out
	}
	if s.Waits != nil {
		s.Waits(target, results)
	}
	checks := map[string]CheckReader{}
	if cr := s.Checks[target]; cr != nil {
		checks[target] = cr
	}
	contested := make(chan struct{}, 1)
	f := &FollowUp{Checks: checks, Poll: s.Poll, Log: s.Log, OnContested: func(string, []string) {
		select {
		case contested <- struct{}{}:
		default:
		}
	}}
	defer f.Stop()
	woke := make(chan struct{}, 1)
	wake := func(string) {
		select {
		case woke <- struct{}{}:
		default:
		}
	}
	for pending(out.results) {
		f.Observe(Result{Targets: out.results}, nil, wake)
		limit := time.NewTimer(time.Second)
		select {
		case <-woke:
		case <-limit.C:
		case <-contested:
			// Another writer deletes what this run adds: it runs on (a
			// serve, maybe with a newer configuration); this run yields
			// (contested.go).
			limit.Stop()
			out.contested = true
			return out
		case <-ctx.Done():
		}
		limit.Stop()
		if ctx.Err() != nil {
			out.waiting = len(waitingByTarget(Result{Targets: out.results})) > 0
			return out
		}
		next, _ := s.Run(OnlyTarget(ctx, target)) // its failure is in its results
		out.results = mergedTargets(out.results, next.Targets)
		out.applied = out.applied || next.Status == StatusApplied
		out.gateDeferred = out.gateDeferred || next.gateDeferred
	}
	return out
}

// pending reports whether a target's results leave work that a later
// reconcile of it would do: servers waiting for their check or for their
// sessions to end, in a backend whose reconcile did not fail (other than by
// HAProxy refusing single servers; waitingByTarget leaves those out too).
func pending(results []TargetResult) bool {
	for _, t := range results {
		if t.Error != "" && len(t.Failed) == 0 {
			continue
		}
		if len(t.Waiting) > 0 || len(t.Draining) > 0 {
			return true
		}
	}
	return false
}

// settleError is what Settle returns for its merged results: the failed
// targets, each with its class, and whether servers still wait.
func settleError(results []TargetResult, stillWaiting, contested bool) error {
	var errs []error
	if failed := failedTargets(results); len(failed) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s", ErrTargets, strings.Join(failed, ", ")))
	}
	if contested {
		errs = append(errs, ErrContested)
	}
	if stillWaiting {
		errs = append(errs, ErrStillWaiting)
	}
	if len(errs) == 0 {
		return nil
	}
	err := errs[0]
	for _, e := range errs[1:] {
		err = fmt.Errorf("%w; %w", err, e)
	}
	return err
}

// failedTargets names, once each and in order, the targets with a failed
// backend, each with its failure's class: "unix:///run/b.sock
// (unreachable)".
func failedTargets(results []TargetResult) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range results {
		if t.Error == "" || seen[t.Target] {
			continue
		}
		seen[t.Target] = true
		out = append(out, fmt.Sprintf("%s (%s)", t.Target, t.ErrorClass))
	}
	return out
}

// targetNames lists the targets of results, once each, in order.
func targetNames(results []TargetResult) []string {
	var out []string
	for _, t := range results {
		if !slices.Contains(out, t.Target) {
			out = append(out, t.Target)
		}
	}
	return out
}

// mergedTargets is next with each target and backend's lists joined to
// prev's, its attempts added to prev's; what prev has and next lacks (a
// reconcile that stopped before that backend) stays as prev had it, in
// prev's order.
func mergedTargets(prev, next []TargetResult) []TargetResult {
	type key struct{ target, backend string }
	latest := make(map[key]TargetResult, len(next))
	for _, t := range next {
		latest[key{t.Target, t.Backend}] = t
	}
	out := make([]TargetResult, 0, len(prev)+len(next))
	seen := make(map[key]bool, len(prev))
	for _, p := range prev {
		k := key{p.Target, p.Backend}
		seen[k] = true
		t, ok := latest[k]
		if !ok {
			out = append(out, p)
			continue
		}
		t.Add, t.Update, t.Drain = union(p.Add, t.Add), union(p.Update, t.Update), union(p.Drain, t.Drain)
		t.Maint, t.Delete = union(p.Maint, t.Maint), union(p.Delete, t.Delete)
		t.Reload, t.changed = t.Reload || p.Reload, t.changed || p.changed
		t.Attempts += p.Attempts
		out = append(out, t)
	}
	for _, t := range next {
		if !seen[key{t.Target, t.Backend}] {
			out = append(out, t)
		}
	}
	return out
}

// ErrContested means another writer deleted servers this run added, twice
// before their check passed (contested.go): the run stopped following them.
var ErrContested = errors.New("another writer deletes or parks the servers this run adds (a serve, or another instance, with another configuration?): not followed further")

// ErrStillWaiting means servers still waited for their first passed check
// when the time given to them ended.
var ErrStillWaiting = errStillWaiting{}

type errStillWaiting struct{}

func (errStillWaiting) Error() string {
	return "servers still wait for their first passed health check"
}
