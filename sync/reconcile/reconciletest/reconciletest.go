// Package reconciletest is an HAProxy backend in memory behind the
// reconcile.Driver interface, for tests of the reconciler, the handler and
// the metrics that are not about a driver, as external-dns tests its
// controller on an in-memory provider. The drivers' own tests use real
// HAProxy and the spec-validating test Data Plane API (sync/dataplanetest).
package reconciletest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Driver is one HAProxy backend in memory. Its servers are UP unless in
// maintenance (as if every check passed at once). Set the fault fields
// before use or under its lock (Do).
type Driver struct {
	// ID is its name in results; "mem" if empty.
	ID string
	// Pol is the Policy its plans are computed with.
	Pol plan.Policy

	mu      sync.Mutex
	servers map[string]model.Server
	// Refuse lists servers whose every change is refused, as HAProxy
	// refuses a command: the others still apply (plan.ServerErrors).
	Refuse map[string]bool
	// FailFirst fails that many applies with a temporary error after
	// applying their first change (a connection that broke mid-way).
	FailFirst int
	// Conflicts fails that many applies with a version conflict before
	// applying anything (another writer was first).
	Conflicts int
	// Kind is what each server write counts as (runtime if empty), and
	// Reload makes every Apply that wrote report a reload, as a driver
	// that commits a transaction does.
	Kind   plan.WriteKind
	Reload bool
	// Unexpected, when set, is the cause every Apply that wrote reports
	// for one write its API reloaded for where it applies it at runtime
	// (plan.Applied.UnexpectedReloads).
	Unexpected string
	// ReadErr, ApplyErr fail every Read, Apply.
	ReadErr, ApplyErr error
	// Retry is what Read says of the backend's retry lines (nil: it cannot
	// tell, like the runtime API).
	Retry *model.RetryLines
	// Busy lists servers that still have connections Read does not show:
	// their deletion is deferred (plan.Applied.Deferred), parked, as the
	// runtime API's "del server" answers "still has connections" for a
	// server whose sessions the stats no longer count (idle pooled ones).
	Busy map[string]bool

	reads, applies, writes int
}

// Name is ID or "mem".
func (d *Driver) Name() string {
	if d.ID == "" {
		return "mem"
	}
	return d.ID
}

// Policy is Pol.
func (d *Driver) Policy() plan.Policy { return d.Pol }

// Read returns the servers, sorted by name.
func (d *Driver) Read(_ context.Context, backend string) (model.Backend, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	if d.ReadErr != nil {
		return model.Backend{}, d.ReadErr
	}
	b := model.Backend{Name: backend, Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Retry: d.Retry}
	for _, s := range d.servers {
		s.Up = s.State != model.Maint
		b.Servers = append(b.Servers, s)
	}
	sort.Slice(b.Servers, func(i, j int) bool { return b.Servers[i].Name < b.Servers[j].Name })
	return b, nil
}

// Apply applies p's changes in order.
func (d *Driver) Apply(_ context.Context, p plan.Plan) (plan.Applied, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applies++
	if d.ApplyErr != nil {
		return plan.Applied{}, d.ApplyErr
	}
	if d.Conflicts > 0 {
		d.Conflicts--
		return plan.Applied{}, &failure.ConflictError{Msg: "version mismatch: another writer was first"}
	}
	if d.servers == nil {
		d.servers = map[string]model.Server{}
	}
	var out plan.Applied
	var failed plan.ServerErrors
	for i, ch := range p.Changes {
		if d.Refuse[ch.Name] {
			err := errors.New("refused")
			failed = append(failed, plan.ServerError{Server: ch.Name, Error: err.Error(), Err: err})
			continue
		}
		if ch.Action == plan.Delete && d.Busy[ch.Name] {
			out.Deferred = append(out.Deferred, ch.Name)
			if ch.Old.State == model.Maint {
				continue // already parked: nothing written
			}
			parked := *ch.Old
			parked.State = model.Maint
			d.servers[ch.Name] = parked
		} else if ch.Action == plan.Delete {
			delete(d.servers, ch.Name)
		} else {
			d.servers[ch.Name] = *ch.New
		}
		d.writes++
		out.Count(cmp.Or(d.Kind, plan.RuntimeWrite))
		out.Reload = out.Reload || d.Reload
		if d.Unexpected != "" && out.UnexpectedReloads == 0 {
			out.UnexpectedReloads, out.UnexpectedReason = 1, d.Unexpected
		}
		if d.FailFirst > 0 && i == 0 {
			d.FailFirst--
			return out, fmt.Errorf("after %s: %w", ch.Name, &failure.NetworkError{Err: errors.New("connection reset")})
		}
	}
	if len(failed) > 0 {
		return out, failed
	}
	return out, nil
}

// States maps each server's address to its state: "ready", "drain", "maint".
func (d *Driver) States() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]string{}
	for _, s := range d.servers {
		out[s.Address] = string(s.State)
	}
	return out
}

// Servers returns a copy of the servers by name.
func (d *Driver) Servers() map[string]model.Server {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]model.Server, len(d.servers))
	for k, v := range d.servers {
		out[k] = v
	}
	return out
}

// Counts returns how many Reads, Applies and server writes it took.
func (d *Driver) Counts() (reads, applies, writes int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads, d.applies, d.writes
}

// Do runs f under the driver's lock, to change its fault fields while
// reconciles run.
func (d *Driver) Do(f func(*Driver)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

// Reconciler returns a reconciler for tests: pod mode, one backend "be",
// roundrobin with tcp-check, a 5 s timeout and a constant 5 ms backoff.
func Reconciler(src reconcile.Source, targets ...reconcile.Driver) *reconcile.Reconciler {
	return &reconcile.Reconciler{
		Source: src,
		Options: desired.Options{
			Mode: desired.PodMode, Backends: []desired.PortBackend{{Backend: "be"}},
			Settings: model.Settings{Balance: "roundrobin", TCPCheck: true},
			Check:    model.Check{Inter: 5 * time.Second, Rise: 2, Fall: 2},
		},
		Targets: targets,
		Timeout: 5 * time.Second,
		Backoff: func() retry.Backoff { return retry.NewConstant(5 * time.Millisecond) },
	}
}
