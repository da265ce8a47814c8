// Package reconcile runs one full reconcile, the only place where the
// Kubernetes source, the planner and the HAProxy drivers meet:
//
//  1. read the Service, its EndpointSlices and Nodes once; on any error stop
//     and change nothing;
//  2. compute the desired backends (pure);
//  3. for every HAProxy target in parallel, and every backend in turn: read the
//     current servers, plan, apply;
//  4. on a temporary failure (network, 429, 5xx, version conflict) wait with
//     exponential backoff and jitter and start again from step 3's read, never
//     replaying an old plan; all within the reconcile timeout.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// Source reads the Kubernetes objects.
type Source interface {
	Read(ctx context.Context) (desired.Input, error)
}

// Driver is one HAProxy instance.
type Driver interface {
	// Name identifies the target in results (never with credentials).
	Name() string
	// Read returns the backend's current settings and servers.
	Read(ctx context.Context, backend string) (model.Backend, error)
	// Apply makes a plan true, starting from the revision it was computed at.
	Apply(ctx context.Context, p plan.Plan) (plan.Applied, error)
	// Policy says how plans for this driver treat deletions.
	Policy() plan.Policy
}

// Reconciler holds what one reconcile needs; it keeps nothing between calls.
type Reconciler struct {
	Source  Source
	Options desired.Options
	Targets []Driver
	// Timeout bounds one reconcile, retries included.
	Timeout time.Duration
	// Backoff returns a fresh backoff per target and backend; nil means the
	// default (exponential from 50ms, capped at 2s, 20% jitter).
	Backoff func() retry.Backoff
	Log     *slog.Logger
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
	Status     string         `json:"status"`
	Desired    int            `json:"desired"`
	Targets    []TargetResult `json:"targets"`
	DurationMs float64        `json:"durationMs"`
	Error      string         `json:"error,omitempty"`
}

// TargetResult is what happened to one backend of one HAProxy target.
type TargetResult struct {
	Target   string   `json:"target"`
	Backend  string   `json:"backend"`
	Add      []string `json:"add"`
	Update   []string `json:"update"`
	Drain    []string `json:"drain"`
	Maint    []string `json:"maint"`
	Delete   []string `json:"delete"`
	Reload   bool     `json:"reload"`
	Attempts int      `json:"attempts"`
	Error    string   `json:"error"`

	changed bool
}

// ErrTargets means at least one HAProxy target failed; Result says which.
var ErrTargets = errors.New("haproxy target failed")

// Reconcile runs one full reconcile. With dryRun it plans and applies nothing.
// The error is nil only when every target succeeded; the Result is always
// filled in as far as the reconcile got.
func (r *Reconciler) Reconcile(ctx context.Context, dryRun bool) (Result, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	res, err := r.reconcile(ctx, dryRun)
	res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		res.Status = StatusError
		res.Error = err.Error()
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, dryRun bool) (Result, error) {
	res := Result{Targets: []TargetResult{}}
	in, err := r.Source.Read(ctx)
	if err != nil {
		return res, fmt.Errorf("read kubernetes: %w", err)
	}
	backends, warnings, err := desired.Compute(in, r.Options)
	if err != nil {
		return res, fmt.Errorf("desired state: %w", err)
	}
	for _, w := range warnings {
		r.log().Warn("endpoint skipped", "reason", w)
	}
	for _, b := range backends {
		res.Desired += len(b.Servers)
	}

	results := make([][]TargetResult, len(r.Targets))
	var wg sync.WaitGroup
	for i, t := range r.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range backends {
				results[i] = append(results[i], r.syncBackend(ctx, t, b, dryRun))
			}
		}()
	}
	wg.Wait()

	res.Status = StatusUnchanged
	if dryRun {
		res.Status = StatusPlanned
	}
	failed := 0
	for _, tr := range results {
		for _, t := range tr {
			res.Targets = append(res.Targets, t)
			if t.Error != "" {
				failed++
			} else if t.changed && !dryRun {
				res.Status = StatusApplied
			}
		}
	}
	if failed > 0 {
		return res, fmt.Errorf("%w: %d of %d", ErrTargets, failed, len(res.Targets))
	}
	return res, nil
}

// syncBackend reads, plans and applies one backend on one target, retrying
// temporary failures from a fresh read.
func (r *Reconciler) syncBackend(ctx context.Context, t Driver, want model.Backend, dryRun bool) TargetResult {
	tr := TargetResult{Target: t.Name(), Backend: want.Name}
	backoff := r.backoff()
	err := retry.Do(ctx, backoff, func(ctx context.Context) error {
		tr.Attempts++
		cur, err := t.Read(ctx, want.Name)
		if err != nil {
			return retryable(err)
		}
		p := plan.CalculateWith(cur, want, t.Policy())
		tr.fill(p)
		if dryRun || !p.HasChanges() {
			return nil
		}
		applied, err := t.Apply(ctx, p)
		tr.Reload = tr.Reload || applied.Reload
		if err != nil {
			r.log().Warn("apply failed", "target", tr.Target, "backend", want.Name, "attempt", tr.Attempts, "error", err)
			return retryable(err)
		}
		return nil
	})
	if err != nil {
		tr.Error = err.Error()
	}
	return tr
}

func (tr *TargetResult) fill(p plan.Plan) {
	tr.Add, tr.Update, tr.Drain = p.Names(plan.Add), p.Names(plan.Update), p.Names(plan.Drain)
	tr.Maint, tr.Delete = p.Names(plan.Maint), p.Names(plan.Delete)
	tr.changed = p.HasChanges()
	if p.Settings != nil {
		tr.Update = append(tr.Update, "backend:"+p.Backend)
	}
}

// retryable marks err for another attempt when it says it is temporary.
func retryable(err error) error {
	var t interface{ Temporary() bool }
	if errors.As(err, &t) && t.Temporary() {
		return retry.RetryableError(err)
	}
	return err
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
