// Package reconcile runs one full reconcile, the only place where the
// Kubernetes source, the planner and the HAProxy drivers meet:
//
//  1. for every HAProxy target in parallel, and every backend in turn, read
//     the current servers;
//  2. then read the Service, its EndpointSlices and Nodes (one read shared
//     by the targets whose HAProxy read ended before it started); on any
//     error stop and change nothing;
//  3. compute the desired backends and the plan (pure), apply it with the
//     version of step 1's read;
//  4. on a temporary failure (failure.Temporary: network, 429, 5xx, version
//     conflict) wait with exponential backoff and jitter and start again
//     from step 1, never replaying an old plan; all within the reconcile
//     timeout. Each result carries its failure's class.
//
// Reading HAProxy before Kubernetes is what makes replicas safe together;
// see freshReader.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"
	"k8s.io/apimachinery/pkg/types"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// Source reads the Kubernetes objects.
type Source interface {
	Read(ctx context.Context) (desired.Input, error)
}

// Driver is one HAProxy instance.
//
// Errors follow package failure: a Temporary one (no answer, 429, 5xx, a
// lost version race) is retried from a fresh read; an Unreachable or
// Permanent one ends the target's attempts; an error without a class counts
// as Permanent.
type Driver interface {
	// Name identifies the target in results (never with credentials).
	Name() string
	// Read returns the backend's current settings and servers. A backend
	// the driver cannot manage as configured is a *failure.BackendError.
	Read(ctx context.Context, backend string) (model.Backend, error)
	// Apply makes a plan true, starting from the revision it was computed
	// at. Changes HAProxy refused for their one server each, the others
	// applied, are a plan.ServerErrors (Permanent); any other error may
	// leave part of the plan applied, and the next attempt re-reads.
	Apply(ctx context.Context, p plan.Plan) (plan.Applied, error)
	// Policy says how plans for this driver treat deletions.
	Policy() plan.Policy
}

// UpReader is a Driver whose Read does not say which servers are UP, and
// that can tell at the cost of another call. The reconciler asks only when
// the mass-deletion guard holds: it releases once the replacements are UP.
type UpReader interface {
	ReadUp(ctx context.Context, backend string) (map[string]bool, error)
}

// Runner runs one full reconcile: a *Reconciler, or a wrapper around one
// (metrics). The HTTP handler and the metrics wrapper take a Runner.
type Runner interface {
	Reconcile(ctx context.Context, dryRun bool) (Result, error)
}

// Reconciler holds what one reconcile needs; it keeps nothing between calls.
type Reconciler struct {
	Source  Source
	Options desired.Options
	Targets []Driver
	// Timeout bounds one reconcile, retries included.
	Timeout time.Duration
	// Straggle bounds how long a target that keeps failing is retried
	// once another target of the reconcile finished (stragglers), and how
	// long one whose attempt is in flight is waited for (eachTarget); 3 s
	// if 0.
	Straggle time.Duration
	// Backoff returns a fresh backoff per target and backend; nil means the
	// default (exponential from 50ms, capped at 2s, 20% jitter).
	Backoff func() retry.Backoff
	// GuardPercent is the mass-deletion guard (plan.Policy.GuardPercent).
	GuardPercent int
	// MaxServers caps a backend's servers (plan.Policy.MaxServers; 0: none).
	MaxServers int
	// DrainTimeout bounds how long a parked server's sessions are waited
	// for before it is deleted anyway (plan.Policy.DrainTimeout; 0: no bound).
	DrainTimeout time.Duration
	// OnTransition, when set, is told of every server state transition
	// applied (each is also logged once, as "server transition").
	OnTransition func(Transition)
	// Gate, when set, sets the pods' readiness gate after each real
	// reconcile (POD_READINESS_GATE).
	Gate PodGate
	// OnProgrammed, when set, is told of every Kubernetes change applied,
	// timed from its EndpointSlice stamp (see Programmed).
	OnProgrammed func(Programmed)
	Log          *slog.Logger
	// Cluster is CLUSTER_NAME: this instance reads, plans and counts only
	// the servers named with Options.NamePrefix (plan.Policy.Owner), and
	// its results carry the name. Empty: every server is its own.
	Cluster string
	// Leaving says this Reconciler's backends are no Service's any more
	// (plan.Policy.Leaving): package fleet's left backends, whose every
	// reconcile follows a fresh list of the Services that confirms it.
	Leaving bool
	// LeftBefore says an earlier read of the Services found them left
	// too (plan.Policy.LeftBefore): only then are parked servers deleted.
	LeftBefore bool

	// Locks, when set, are the per-target write locks this Reconciler
	// shares with others (package fleet: one Reconciler per Service, one
	// writer per HAProxy at a time); nil: its own.
	Locks *Locks
	// Now is the clock of the warnings said again while their cause lasts
	// (warnLasting); nil: time.Now.
	Now func() time.Time

	locks  Locks    // see lock
	warned sync.Map // target and backend → missing lines last logged (see warnMissingLines)
	// refused: target and backend → the servers HAProxy refused a change
	// of on the last apply there (plan.Policy.Refused).
	refused sync.Map
	// gated: target, backend and server → true while the server is held
	// in drain for its check since this Reconciler gated it (named).
	gated sync.Map
	// lasting: the warnings said while their cause lasts (warnLasting).
	lastingMu sync.Mutex
	lasting   map[string]said
	// fresh counts the fresh reconciles running, and freshAt is when the
	// last one started or ended: a Snapshot read before either may miss
	// what it wrote (reconcileFrom).
	freshMu sync.Mutex
	fresh   int
	freshAt time.Time
}

// Status values of a Result.
const (
	StatusApplied   = "applied"
	StatusUnchanged = "unchanged"
	StatusPlanned   = "planned"
	StatusError     = "error"
)

// Result is the answer to one reconcile, as the HTTP API returns it.
type Result struct {
	Status  string         `json:"status"`
	Desired int            `json:"desired"`
	Targets []TargetResult `json:"targets"`
	// Skipped lists endpoints and Nodes left out (the first
	// desired.MaxSkippedListed); SkippedByReason counts them all.
	Skipped         []desired.Skipped `json:"skipped"`
	SkippedByReason map[string]int    `json:"skippedByReason,omitempty"`
	// Warnings says what in the configuration matches nothing in
	// Kubernetes (a Service or port not found, no EndpointSlice carrying
	// the Service's name, ...): why desired may be 0. See desired.Warning.
	Warnings   []desired.Warning `json:"warnings,omitempty"`
	DurationMs float64           `json:"durationMs"`
	// Cluster is CLUSTER_NAME, when set: whose servers this result is about.
	Cluster string `json:"cluster,omitempty"`
	Error   string `json:"error,omitempty"`
	// ErrorClass says whether trying again may help (failure.Class): the
	// least hopeful class of the failures, empty on success.
	ErrorClass failure.Class `json:"errorClass,omitempty"`
	// ServiceUID is the followed Service's, when Kubernetes was read: what
	// an Event about it names (package events).
	ServiceUID types.UID `json:"-"`
	// podsStarting: pods that list the readiness gate wait for their
	// containers; no EndpointSlice change will say when they are ready.
	podsStarting bool
	// gateDeferred: a reconcile of some targets only changed servers while
	// the readiness gate is on; the gate waits for a whole reconcile.
	gateDeferred bool
}

type onlyTargetKey struct{}

// OnlyTarget returns a context whose reconciles reconcile the target named
// name alone (Driver.Name): what the follow-up asks for when a server passed
// its check there, so that another target that hangs cannot hold it back.
// It travels in the context so that every Runner wrapping a Reconciler
// (metrics, Events) passes it on unchanged.
func OnlyTarget(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, onlyTargetKey{}, name)
}

type passKey struct{}

// WithPass returns a context that makes one pass of every reconcile under
// it: what a driver checks once per pass (the pair check) is checked once
// for all of them. Reconcile makes its own pass unless ctx has one (a
// many-Services pass shares one across its Services).
func WithPass(ctx context.Context) context.Context {
	if PassOf(ctx) != nil {
		return ctx
	}
	return context.WithValue(ctx, passKey{}, new(int))
}

// PassOf returns ctx's pass (WithPass), nil outside one; two contexts of
// one pass return equal values.
func PassOf(ctx context.Context) any {
	if p, ok := ctx.Value(passKey{}).(*int); ok {
		return p
	}
	return nil
}

type targetDoneKey struct{}

// WithTargetDone returns a context whose reconciles tell done each target's
// results as soon as that target is done, before the others are: the
// follow-up starts watching a target's waiting servers while another target
// still hangs. One given under another is told after it: neither hides
// the other.
func WithTargetDone(ctx context.Context, done func(target string, results []TargetResult)) context.Context {
	if outer, ok := ctx.Value(targetDoneKey{}).(func(string, []TargetResult)); ok {
		inner := done
		done = func(target string, results []TargetResult) { outer(target, results); inner(target, results) }
	}
	return context.WithValue(ctx, targetDoneKey{}, done)
}

// OnlyTargetOf returns the target ctx restricts reconciles to (OnlyTarget),
// if any: such a reconcile says nothing of the others (metrics).
func OnlyTargetOf(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(onlyTargetKey{}).(string)
	return name, ok
}

// targets returns the targets ctx asks for: all, or the one OnlyTarget named.
func (r *Reconciler) targets(ctx context.Context) ([]Driver, bool) {
	name, ok := OnlyTargetOf(ctx)
	if !ok {
		return r.Targets, false
	}
	for _, t := range r.Targets {
		if t.Name() == name {
			return []Driver{t}, true
		}
	}
	return nil, true
}

// TargetResult is what happened to one backend of one HAProxy target.
type TargetResult struct {
	Target  string   `json:"target"`
	Backend string   `json:"backend"`
	Add     []string `json:"add"`
	Update  []string `json:"update"`
	Drain   []string `json:"drain"`
	Maint   []string `json:"maint"`
	Delete  []string `json:"delete"`
	Reload  bool     `json:"reload"`
	// UnexpectedReloads counts writes HAProxy's API answered with a reload
	// where it applies them at runtime (a server add, a weight, address or
	// maintenance change): the log says why, once.
	UnexpectedReloads int    `json:"unexpectedReloads,omitempty"`
	Attempts          int    `json:"attempts"`
	Error             string `json:"error"`
	// ErrorClass is Error's class (failure.Class), empty on success.
	ErrorClass failure.Class `json:"errorClass,omitempty"`
	// BackendRefused says Error is the target refusing the backend as
	// configured (a failure.BackendError), for package alarm.
	BackendRefused bool `json:"-"`
	// Guarded lists servers the mass-deletion guard parked instead of
	// deleting; they are also in Maint when this reconcile parked them.
	Guarded []string `json:"guarded,omitempty"`
	// Capped lists desired servers not added: the backend is at MaxServers.
	Capped []string `json:"capped,omitempty"`
	// Failed lists the changes HAProxy refused, one server each; the other
	// changes were applied.
	Failed []plan.ServerError `json:"failed,omitempty"`
	// Waiting lists servers kept out of service until their health check
	// passes; a later reconcile puts them in service.
	Waiting []string `json:"waiting,omitempty"`
	// Loading lists the servers of Waiting that the running HAProxy does
	// not show yet: haproxy.cfg holds them, parked, and a reload is to load
	// them (model.Runtime.Loading); their check starts once it ran.
	Loading []string `json:"loading,omitempty"`
	// Draining lists unwanted servers parked until their sessions end; a
	// later reconcile deletes them.
	Draining []string `json:"draining,omitempty"`
	// HandingOver lists servers kept in their state until the server that
	// replaces them (a zone role change) is in service; a later reconcile
	// parks them.
	HandingOver []string `json:"handingOver,omitempty"`
	// HealthPortTCP lists servers checked on kube-proxy's health port with
	// a bare TCP connect (HAProxy's L4OK), which passes a node that cannot
	// serve: the backend lacks option httpchk GET /healthz.
	HealthPortTCP []string `json:"healthPortTCP,omitempty"`
	// MissingBackendLines lists the recommended backend lines (option
	// redispatch 1, retries 3, in http mode retry-on conn-failure
	// empty-response) the backend runs without, its defaults section
	// applied; see model.RetryLines. LinesRead says the driver could tell
	// (the runtime API cannot: then the list is always empty).
	MissingBackendLines []string `json:"missingBackendLines,omitempty"`
	LinesRead           bool     `json:"-"`
	// Servers counts the backend's servers by state (ready, drain, maint)
	// as this reconcile left them; empty after a failure or a dry run.
	Servers map[string]int `json:"servers,omitempty"`
	// Zones counts this instance's desired servers by zone and role, with
	// HAPROXY_LOCAL_ZONE only (see zoneCounts).
	Zones map[string]ZoneCount `json:"zones,omitempty"`
	// Slots counts the backend's slots of haproxy.cfg (server-template
	// lines the runtime API driver fills) by use once this reconcile's
	// plan is applied: filled, idle. Empty when it has none.
	Slots map[string]int `json:"slots,omitempty"`
	// NoSlots says the backend has no slot and the driver adds servers
	// bare (plan.Policy.BareAdds, the runtime API alone): they get none of
	// haproxy.cfg's default-server keywords, and a reload drops them.
	NoSlots bool `json:"noSlots,omitempty"`
	// Overflow lists the desired servers that found no free slot in a
	// backend that has slots: added with "add server" (a reload drops
	// them, and they get no default-server keyword).
	Overflow []string `json:"overflow,omitempty"`
	// Plan, in a dry run, is each planned change with the server's address,
	// state and weight before and after.
	Plan []PlannedChange `json:"plan,omitempty"`

	// changed: the driver wrote something to HAProxy (Applied.Writes).
	changed bool
	kubeErr error
	// inService and notInService say where each server stands once this
	// reconcile's plan is applied (for the readiness gate).
	inService    map[string]bool
	notInService map[string]string
	// onlyRefused says Error is no more than the refusals in Failed (a
	// plan.ServerErrors): the rest of the plan was applied, and inService
	// and notInService say where the other servers stand.
	onlyRefused bool
}

// Pending reports whether some target has servers waiting for their check
// or for their sessions to end: a later reconcile has work to do, though
// nothing in Kubernetes will change to ask for it.
func (r Result) Pending() bool {
	for _, t := range r.Targets {
		if len(t.Waiting) > 0 || len(t.Draining) > 0 || len(t.HandingOver) > 0 {
			return true
		}
	}
	return false
}

// desiredReadTimeout bounds the Kubernetes read a reconcile makes for its
// result's desired count alone, when every target failed before reading.
const desiredReadTimeout = 2 * time.Second

// maxRoundRobin is HAProxy's limit of active servers per roundrobin backend.
const maxRoundRobin = 4095

// ErrTargets means at least one HAProxy target failed; Result says which.
var ErrTargets = errors.New("haproxy target failed")

// Reconcile runs one full reconcile. With dryRun it plans and applies nothing.
// The error is nil only when every target succeeded; the Result is always
// filled in as far as the reconcile got.
func (r *Reconciler) Reconcile(ctx context.Context, dryRun bool) (Result, error) {
	start := time.Now()
	// An attempt left behind (eachTarget) outlives the return, not the
	// caller's cancel (a shutdown) nor the deadline.
	ctx = context.WithValue(WithPass(ctx), callerKey{}, ctx)
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	res, err := r.reconcile(ctx, dryRun)
	res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		res.Status = StatusError
		res.Error = err.Error()
		res.ErrorClass = leastHopeful(res.Targets, err)
	}
	return res, err
}

// leastHopeful is the class of a failed reconcile: that of a Kubernetes
// failure, else the least hopeful of the targets' (one Permanent target
// makes trying the whole again pointless, though the others may recover).
func leastHopeful(targets []TargetResult, err error) failure.Class {
	if !errors.Is(err, ErrTargets) {
		return failure.Of(err)
	}
	out := failure.Class("")
	rank := map[failure.Class]int{failure.Temporary: 1, failure.Unreachable: 2, failure.Permanent: 3}
	for _, t := range targets {
		if rank[t.ErrorClass] > rank[out] {
			out = t.ErrorClass
		}
	}
	return cmp.Or(out, failure.Permanent)
}

func (r *Reconciler) reconcile(ctx context.Context, dryRun bool) (Result, error) {
	snap := snapshotOf(ctx)
	if snap != nil {
		ctx = WithSnapshot(ctx, nil) // for the fresh run below, if any
		// The readiness gate reads pods and writes their conditions: no
		// snapshot has them.
		if !dryRun && r.Gate == nil {
			if res, err := r.reconcileFrom(ctx, snap); err == nil {
				return res, nil
			}
		}
	}
	return r.reconcileFresh(ctx, nil, dryRun)
}

// reconcileFrom is a reconcile planned from snap alone: its result when
// nothing is written, else an error (errStale, or any failure), and the
// caller reconciles afresh. A snapshot read while a fresh reconcile of this
// Reconciler ran, or before one (its Service's lane), is stale for it: that
// reconcile's writes, refusals and waits may be missing from it.
func (r *Reconciler) reconcileFrom(ctx context.Context, snap *Snapshot) (Result, error) {
	r.freshMu.Lock()
	stale := r.fresh > 0 || !r.freshAt.Before(snap.ReadAt)
	r.freshMu.Unlock()
	if stale {
		return Result{}, errStale
	}
	res, err := r.reconcileFresh(ctx, snap, false)
	if err == nil && res.Status != StatusUnchanged {
		err = errStale
	}
	return res, err
}

// reconcileFresh reconciles from fresh reads, or from snap when not nil
// (reconcileFrom: no lock, nothing written).
func (r *Reconciler) reconcileFresh(ctx context.Context, snap *Snapshot, dryRun bool) (Result, error) {
	if snap == nil && !dryRun {
		r.freshMu.Lock()
		r.fresh++
		r.freshAt = time.Now()
		r.freshMu.Unlock()
		defer func() {
			r.freshMu.Lock()
			r.fresh--
			r.freshAt = time.Now()
			r.freshMu.Unlock()
		}()
	}
	res := Result{Targets: []TargetResult{}, Skipped: []desired.Skipped{}, Cluster: r.Cluster}
	var warnOnce sync.Once
	src := r.Source
	if snap != nil {
		src = staticSource{snap.Input}
	}
	kube := &freshReader{src: src, opts: r.Options, skipped: func(rep desired.Report) {
		if rep.Total() == 0 {
			r.lastingGone("skipped")
			return
		}
		warnOnce.Do(func() { // one line per reconcile at most, however many reads
			first := rep.Skipped[0]
			r.warnLasting("skipped", fmt.Sprint(rep.Counts), "endpoints skipped", "count", rep.Total(), "byReason", rep.Counts,
				"first", first.Endpoint, "reason", first.Reason, "detail", first.Detail)
		})
	}}

	targets, partial := r.targets(ctx)
	ctx = context.WithValue(ctx, stragglersKey{}, &stragglers{grace: r.straggle()})
	results := r.eachTarget(ctx, targets, !dryRun && snap == nil, snap != nil, func(ctx context.Context, t Driver, left func() bool) ([]TargetResult, bool) {
		var out []TargetResult
		for _, pb := range r.Options.Backends {
			tr, err := r.syncBackend(ctx, t, pb.Backend, kube, snap, dryRun)
			out = append(out, tr)
			if errors.As(err, new(*kubeError)) || snap != nil && err != nil {
				return out, false // the same read would fail for every backend; a snapshot's failure is read again afresh
			}
		}
		ctx.Value(stragglersKey{}).(*stragglers).finished(time.Now())
		if done, ok := ctx.Value(targetDoneKey{}).(func(string, []TargetResult)); ok && !dryRun && snap == nil && !left() {
			done(t.Name(), out)
		}
		return out, !slices.ContainsFunc(out, func(tr TargetResult) bool { return tr.Error != "" })
	})
	if kube.latest().started.IsZero() && !slices.ContainsFunc(results, func(tr []TargetResult) bool {
		return slices.ContainsFunc(tr, func(t TargetResult) bool { return t.kubeErr != nil })
	}) {
		// Every target failed before it read Kubernetes (HAProxy is read
		// first): one read for the result alone, or it would say
		// "desired": 0 when servers are desired. On a context of its own,
		// bounded, since a target that hung until the deadline ended ctx.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), desiredReadTimeout)
		_, _ = kube.after(rctx, time.Now())
		cancel()
	}
	good := kube.latest()
	var uid types.UID
	res.Warnings, uid = kube.warnings()
	res.Desired = good.desired()
	res.ServiceUID = cmp.Or(good.uid, uid)
	report := good.report
	res.SkippedByReason = report.Counts
	if report.Skipped != nil {
		res.Skipped = report.Skipped
	}

	res.Status = StatusUnchanged
	if dryRun {
		res.Status = StatusPlanned
	}
	failed := 0
	var kubeErr error
	for _, tr := range results {
		for _, t := range tr {
			res.Targets = append(res.Targets, t)
			switch {
			case t.kubeErr != nil:
				kubeErr = t.kubeErr
				failed++
			case t.Error != "":
				failed++
			case t.changed && !dryRun:
				res.Status = StatusApplied
			}
		}
	}
	if kubeErr != nil {
		return res, kubeErr
	}
	if r.Gate != nil && !dryRun && partial {
		res.gateDeferred = res.Status == StatusApplied
	} else if r.Gate != nil && !dryRun {
		if in, ok := gateInput(res.Targets, good.backends, good.pods); ok {
			r.Gate.Update(ctx, in)
		}
		for i := range good.pods {
			res.podsStarting = res.podsStarting || desired.GatePending(&good.pods[i])
		}
	}
	if failed > 0 {
		return res, fmt.Errorf("%w: %d of %d", ErrTargets, failed, len(res.Targets))
	}
	return res, nil
}

// lock waits, within ctx, until no other reconcile works on target: a
// reconcile of that target alone (OnlyTarget) may run beside a whole one,
// and two never apply to one HAProxy at once, each from its own read. One
// target's hang holds only that target's lock.
func (r *Reconciler) lock(ctx context.Context, target string) (unlock func(), err error) {
	if r.Locks != nil {
		return r.Locks.Lock(ctx, target)
	}
	return r.locks.Lock(ctx, target)
}

// stragglers is what a reconcile's targets know of each other: a target
// that keeps failing (a host down that resets connections, an API that
// hangs until its timeout) stops retrying grace after another target
// finished (done, or failed for good: a left backend already removed
// there), and fails with its last error, for the follow-up to try again
// (retryableAfter says when). Retried to the reconcile's deadline, it held
// back all that waits for the reconcile's end: in many-Services mode a
// left Service's frontend on the HAProxy that answered, and the claimant
// of its port (class history seed 13, an HA pair: 12 s). An attempt in
// flight is never cut.
type stragglers struct {
	grace time.Duration
	mu    sync.Mutex
	first time.Time // when the first target finished
}

type stragglersKey struct{}

func (s *stragglers) finished(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		s.first = at
	}
}

// late says whether a failed attempt at now is the last.
func (s *stragglers) late(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.first.IsZero() && now.Sub(s.first) >= s.grace
}

// stragglerError is a target's failure it stopped retrying as a straggler:
// its class is the failure's.
type stragglerError struct {
	err   error
	grace time.Duration
}

func (e *stragglerError) Error() string {
	return fmt.Sprintf("%v (not retried any more: another target finished more than %v before)", e.err, e.grace)
}

func (e *stragglerError) Unwrap() error { return e.err }

// Locks are per-target write locks; the zero value is ready.
type Locks struct {
	m    sync.Map // target name → chan struct{}
	mu   sync.Mutex
	left map[string]int // target name → attempts left behind still running (eachTarget)
}

// Lock waits, within ctx, until target is free, and takes it.
func (l *Locks) Lock(ctx context.Context, target string) (unlock func(), err error) {
	v, _ := l.m.LoadOrStore(target, make(chan struct{}, 1))
	sem := v.(chan struct{})
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("another reconcile of %s still runs: %w", target, ctx.Err())
	}
}

// syncBackend reads, plans and applies one backend on one target, retrying
// temporary failures from a fresh read of both sides.
func (r *Reconciler) syncBackend(ctx context.Context, t Driver, backend string, kube *freshReader, snap *Snapshot, dryRun bool) (TargetResult, error) {
	tr := TargetResult{Target: t.Name(), Backend: backend,
		Add: []string{}, Update: []string{}, Drain: []string{}, Maint: []string{}, Delete: []string{}}
	pol := t.Policy()
	var last error // the newest failure, for when the deadline ends the retries
	pol.GuardPercent = r.GuardPercent
	pol.MaxServers = r.MaxServers
	pol.DrainTimeout = r.DrainTimeout
	pol.Owner = r.Options.NamePrefix
	pol.Leaving, pol.LeftBefore = r.Leaving, r.LeftBefore
	var slots plan.SlotUse // the last attempt's
	refusedKey := tr.Target + "\x00" + backend
	if v, ok := r.refused.Load(refusedKey); ok {
		pol.Refused = v.([]string)
	}
	failures := 0 // attempts that failed, for stragglers
	err := retry.Do(ctx, r.backoff(), func(ctx context.Context) error {
		tr.Attempts++
		tr.onlyRefused = false
		began := time.Now()
		retryable := func(ctx context.Context, err error) error {
			failures++
			return retryableAfter(ctx, err, failures, time.Since(began))
		}
		cur, read := model.Backend{}, false
		if snap != nil && snap.Unread[tr.Target] {
			return errStale // its read would hang, or fail, alone as it did at once
		}
		if snap != nil {
			cur, read = snap.Backend(tr.Target, backend)
		}
		var err error
		if !read {
			cur, err = t.Read(ctx, backend)
		}
		if err == nil || ctx.Err() == nil {
			readAnswered(ctx) // HAProxy answers: no hang, whatever its writes take
		}
		if snap != nil && err != nil {
			return err // read again afresh, with retries
		}
		if err != nil {
			if ctx.Err() == nil {
				last = err
			}
			return retryable(ctx, err)
		}
		// Another cluster's servers are not ours to count; the plan gets
		// them all the same, to tell whether any server serves
		// (make-before-break).
		all := cur
		cur = cur.Owned(pol.Owner)
		readAt := time.Now()
		if snap != nil {
			readAt = time.Time{} // the snapshot's, read once
		}
		backends, err := kube.after(ctx, readAt)
		if err != nil {
			return err
		}
		want, ok := find(backends, backend)
		if !ok {
			return fmt.Errorf("desired state has no backend %q", backend)
		}
		// Slots of haproxy.cfg hold endpoints under their own names: the
		// plan fills and frees them by those names.
		want, slots = plan.AssignSlots(all, want, pol.Owner)
		tr.slotUse(slots)
		tr.NoSlots = pol.BareAdds && slots.Total == 0 && len(want.Servers) > 0
		if tr.NoSlots {
			r.warnNoSlots(tr.Target, backend)
		}
		tr.HealthPortTCP = tcpCheckedHealthPorts(cur)
		tr.Zones = zoneCounts(want, r.Options.LocalZone)
		if tr.Attempts == 1 { // said once a reconcile at most, and while it lasts, at LastingEvery
			where := tr.Target + "\x00" + backend
			switch {
			case len(slots.Overflow) > 0:
				r.warnLasting("overflow\x00"+where, fmt.Sprint(slots.Total, len(slots.Overflow)), "no free slot: servers added with add server, which a reload drops and which get none of haproxy.cfg's default-server keywords; declare more slots (server-template)",
					"target", tr.Target, "backend", backend, "slots", slots.Total, "overflow", len(slots.Overflow), "first", slots.Overflow[0])
			default:
				r.lastingGone("overflow\x00" + where)
			}
			switch {
			case cur.Settings.Balance == "roundrobin" && len(want.Servers) > maxRoundRobin:
				r.warnLasting("roundrobin\x00"+where, "", "roundrobin takes at most 4095 active servers per backend; use leastconn or random",
					"target", tr.Target, "backend", backend, "desired", len(want.Servers))
			default:
				r.lastingGone("roundrobin\x00" + where)
			}
			switch {
			case len(tr.HealthPortTCP) > 0:
				r.warnLasting("healthport\x00"+where, fmt.Sprint(len(tr.HealthPortTCP)), "servers checked on kube-proxy's health port with a TCP connect, which passes a node that cannot serve: give the backend option httpchk GET /healthz, or set HAPROXY_CHECK_HEALTH_NODE_PORT=off",
					"target", tr.Target, "backend", backend, "servers", len(tr.HealthPortTCP), "first", tr.HealthPortTCP[0])
			default:
				r.lastingGone("healthport\x00" + where)
			}
		}
		if cur.Retry != nil {
			tr.MissingBackendLines, tr.LinesRead = cur.Retry.MissingWith(r.Options.LocalZone != ""), true
			r.warnMissingLines(tr.Target, backend, tr.MissingBackendLines)
		}
		p := plan.CalculateWith(all, want, pol)
		if snap != nil && (p.HasChanges() || len(p.Guarded) > 0) {
			return errStale // writes, or the guard reads: afresh
		}
		if len(p.Guarded) > 0 {
			p = r.releaseGuard(ctx, t, all, want, pol, p)
		}
		if len(p.Guarded) > 0 {
			r.warnLasting("guard\x00"+tr.Target+"\x00"+backend, fmt.Sprint(len(p.Guarded)), "mass-deletion guard: unwanted servers parked for now, not deleted; a later reconcile deletes them once it confirms them unwanted and their replacements are UP", "target", tr.Target, "backend", backend,
				"servers", len(cur.Servers), "unwanted", len(p.Guarded), "guardPercent", pol.GuardPercent)
		} else {
			r.lastingGone("guard\x00" + tr.Target + "\x00" + backend)
		}
		if !dryRun && !p.HasChanges() && snap == nil {
			r.refused.Delete(refusedKey) // nothing planned: nothing refused (a snapshot's plan may be older than the refusal)
		}
		// An added server left outside an idle slot while it enters is
		// followed as a hand-over: the next reconcile moves it in.
		p.HandingOver = union(p.HandingOver, slots.MovingIn)
		if dryRun || !p.HasChanges() {
			tr.fill(p)
			if dryRun {
				tr.Plan = planned(p)
			}
			if !dryRun {
				tr.Servers = statesAfter(cur, p)
				if r.Gate != nil {
					tr.inService, tr.notInService = inService(cur, p)
				}
			}
			return nil
		}
		applied, err := t.Apply(ctx, p)
		p = p.Deferring(applied.Deferred) // left parked by the driver, not deleted
		tr.fill(p)
		// What the driver wrote says whether anything changed, not the plan:
		// a deletion the driver deferred for a server that still has
		// connections is planned again each second while they last, and
		// writes nothing (the result is "unchanged", whatever waits).
		tr.changed = tr.changed || applied.Writes > 0 || applied.Reload
		tr.Reload = tr.Reload || applied.Reload
		tr.UnexpectedReloads += applied.UnexpectedReloads
		if applied.UnexpectedReloads > 0 {
			r.warnUnexpectedReload(tr.Target, backend, applied.UnexpectedReason, applied.UnexpectedReloads)
		}
		tr.Failed = nil
		if se := (plan.ServerErrors)(nil); errors.As(err, &se) {
			tr.Failed = se
			// A refused server waits for nothing: the next reconcile tries
			// it again, and polling its check would ask every Poll.
			refused := refusedSet(se)
			// Nor does a leaving server wait for it in traffic
			// (make-before-break): the next reconcile's plan knows.
			r.refused.Store(refusedKey, slices.Sorted(maps.Keys(refused)))
			tr.Waiting = slices.DeleteFunc(slices.Clone(tr.Waiting), func(n string) bool { return refused[n] })
			tr.Loading = slices.DeleteFunc(slices.Clone(tr.Loading), func(n string) bool { return refused[n] })
			r.transitions(tr.Target, p, want, se)
			r.programmed(tr.Target, p, want, se, readAt)
			// The other servers were applied: the readiness gate goes on
			// for their pods (gateInput), the refused ones' are not in
			// service.
			tr.onlyRefused = true
			if r.Gate != nil {
				tr.inService, tr.notInService = inService(cur, p)
			}
		} else if err == nil {
			r.refused.Delete(refusedKey)
			r.transitions(tr.Target, p, want, nil)
			r.programmed(tr.Target, p, want, nil, readAt)
		}
		if err != nil {
			r.log().Warn("apply failed", "target", tr.Target, "backend", backend, "attempt", tr.Attempts, "error", err)
			if ctx.Err() == nil {
				last = err
			}
			return retryable(ctx, err)
		}
		tr.Servers = statesAfter(cur, p)
		if r.Gate != nil {
			tr.inService, tr.notInService = inService(cur, p)
		}
		return nil
	})
	tr.inService, tr.notInService = unslot(tr.inService, slots.Names), unslot(tr.notInService, slots.Names)
	if err != nil {
		tr.Error = err.Error()
		tr.ErrorClass = failure.Of(err)
		tr.BackendRefused = errors.As(err, new(*failure.BackendError))
		if ctx.Err() != nil && last != nil {
			tr.Error = fmt.Sprintf("%v after %d attempts; last error: %v", err, tr.Attempts, last)
		}
		if errors.As(err, new(*kubeError)) {
			tr.kubeErr = err
		}
	}
	return tr, err
}

// statesAfter counts the backend's servers by state (ready, gated, drain,
// maint) once p is applied to cur.
func statesAfter(cur model.Backend, p plan.Plan) map[string]int {
	state := make(map[string]model.State, len(cur.Servers))
	for _, s := range cur.Servers {
		state[s.Name] = s.State
	}
	for _, ch := range p.Changes {
		if ch.Action == plan.Delete {
			delete(state, ch.Name)
		} else {
			state[ch.Name] = ch.New.State
		}
	}
	out := map[string]int{string(model.Ready): 0, Gated: 0, string(model.Drain): 0, string(model.Maint): 0}
	for _, st := range state {
		out[string(st)]++
	}
	// A server held in drain for its check is gated, not draining: one
	// name per state in logs and metrics (named).
	for _, n := range p.Waiting {
		if state[n] == model.Drain {
			out[string(model.Drain)]--
			out[Gated]++
		}
	}
	return out
}

// releaseGuard reads which servers are UP when the driver's Read did not
// say, and plans again: the guard releases once every replacement meant to
// serve (desired Ready; plan.Policy.GuardPercent) is UP. If that cannot be
// read, the guard keeps holding.
func (r *Reconciler) releaseGuard(ctx context.Context, t Driver, cur, want model.Backend, pol plan.Policy, p plan.Plan) plan.Plan {
	ur, ok := t.(UpReader)
	if !ok || slices.ContainsFunc(cur.Servers, func(s model.Server) bool { return s.Runtime != nil }) {
		return p // no other way to tell, or Read said already (with the runtime view)
	}
	up, err := ur.ReadUp(ctx, cur.Name)
	if err != nil {
		r.log().Debug("guard: cannot read which servers are UP; it holds", "target", t.Name(), "backend", cur.Name, "error", err)
		return p
	}
	servers := make([]model.Server, len(cur.Servers))
	for i, s := range cur.Servers {
		s.Up = s.Up || up[s.Name]
		servers[i] = s
	}
	cur.Servers = servers
	return plan.CalculateWith(cur, want, pol)
}

func find(backends []model.Backend, name string) (model.Backend, bool) {
	for _, b := range backends {
		if b.Name == name {
			return b, true
		}
	}
	return model.Backend{}, false
}

// fill adds an attempt's plan to the result: the lists gather every
// attempt's (an attempt may have applied part of its plan before failing,
// and the next one plans only the rest); guarded and capped are the last
// attempt's.
func (tr *TargetResult) fill(p plan.Plan) {
	tr.Add = union(tr.Add, p.Names(plan.Add))
	tr.Update = union(tr.Update, p.Names(plan.Update))
	tr.Drain = union(tr.Drain, p.Names(plan.Drain))
	tr.Maint = union(tr.Maint, p.Names(plan.Maint))
	tr.Delete = union(tr.Delete, p.Names(plan.Delete))
	tr.Guarded, tr.Capped = p.Guarded, p.Capped
	tr.Waiting, tr.Loading, tr.Draining, tr.HandingOver = p.Waiting, p.Loading, p.Draining, p.HandingOver
	if p.Settings != nil {
		tr.Update = union(tr.Update, []string{"backend:" + p.Backend})
	}
}

// union returns the sorted union of two name lists.
func union(a, b []string) []string {
	out := append(append([]string{}, a...), b...)
	sort.Strings(out)
	return slices.Compact(out)
}

// retryable marks err for another attempt when its class is Temporary.
// An Unreachable target (nothing listens) fails in milliseconds, and
// retrying it for the rest of the reconcile would only hold back the result
// of the targets that answer: the follow-up tries the reconcile again
// (FollowUp).
//
// A straggler is not retried any more: once another target finished grace
// ago (stragglers), a target that failed twice in a row, or once after an
// attempt as long as grace that met a network failure (a hang to its
// timeout). One failure after a slow attempt (a version conflict after a
// long read or lock wait) is retried as ever.
func retryableAfter(ctx context.Context, err error, failures int, took time.Duration) error {
	if !failure.Retryable(err) {
		return err
	}
	if st, ok := ctx.Value(stragglersKey{}).(*stragglers); ok && st.late(time.Now()) &&
		(failures >= 2 || took >= st.grace && errors.As(err, new(*failure.NetworkError))) {
		return &stragglerError{err: err, grace: st.grace} // the follow-up's
	}
	return retry.RetryableError(err)
}

func (r *Reconciler) backoff() retry.Backoff {
	if r.Backoff != nil {
		return r.Backoff()
	}
	b := retry.NewExponential(50 * time.Millisecond)
	b = retry.WithCappedDuration(2*time.Second, b)
	return retry.WithJitterPercent(20, b)
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}

// programmed reports to OnProgrammed the changes of p that were applied
// (all but the failed ones) and that Kubernetes asked for.
func (r *Reconciler) programmed(target string, p plan.Plan, want model.Backend, failed plan.ServerErrors, readAt time.Time) {
	if r.OnProgrammed == nil {
		return
	}
	for _, pr := range programmed(target, p, want, refusedSet(failed), time.Now(), readAt) {
		r.OnProgrammed(pr)
	}
}

// refusedSet names the servers whose change HAProxy refused.
func refusedSet(failed plan.ServerErrors) map[string]bool {
	refused := make(map[string]bool, len(failed))
	for _, f := range failed {
		refused[f.Server] = true
	}
	return refused
}
