package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// Snapshot is what a full reconcile of many Services read once for all of
// them (package fleet): this Service's Kubernetes objects, and each
// target's backends where a bulk read had them (BulkReader). A Reconcile
// given one (WithSnapshot) plans from it, with no lock, and when nothing
// is to be written it is done: the no-op a full reconcile mostly is costs
// no read of its own. When anything would be written, or the plan needs a
// read of its own (the deletion guard's), or anything fails, the snapshot
// is dropped and the reconcile runs as ever: locked, HAProxy read and then
// Kubernetes, afresh. A snapshot never drives a write.
type Snapshot struct {
	// ReadAt is when the reads began (before the first HAProxy read): a
	// Reconciler whose fresh reconcile ran since, or runs, does not use it.
	ReadAt time.Time
	Input  desired.Input
	// Backend returns target's backend as read, if the bulk read had it
	// (a backend with no server is not told from a missing one there: it
	// is read alone).
	Backend func(target, backend string) (model.Backend, bool)
	// Unread are the targets whose bulk read failed or was left behind
	// (hung): a reconcile from the snapshot does not read them alone
	// either, but runs afresh, where a hung target is left behind.
	Unread map[string]bool
}

// BulkReader reads every backend of a target at once (a
// *runtimeapi.Client): what a Snapshot is made of.
type BulkReader interface {
	ReadAll(ctx context.Context) (map[string]model.Backend, error)
}

type snapshotKey struct{}

// WithSnapshot returns ctx carrying s for one Reconcile.
func WithSnapshot(ctx context.Context, s *Snapshot) context.Context {
	return context.WithValue(ctx, snapshotKey{}, s)
}

func snapshotOf(ctx context.Context) *Snapshot {
	s, _ := ctx.Value(snapshotKey{}).(*Snapshot)
	return s
}

// errStale stops a reconcile from a Snapshot that would write: it runs
// again from fresh reads.
var errStale = errors.New("the snapshot's plan writes: read afresh")

// staticSource serves a Snapshot's objects.
type staticSource struct{ in desired.Input }

func (s staticSource) Read(context.Context) (desired.Input, error) { return s.in, nil }

// BulkOf returns the BulkReader of d, looking through the drivers that wrap
// another (an Unwrap method, as package metrics' counting driver has).
func BulkOf(d Driver) (BulkReader, bool) {
	for d != nil {
		if b, ok := d.(BulkReader); ok {
			return b, true
		}
		u, ok := d.(interface{ Unwrap() Driver })
		if !ok {
			return nil, false
		}
		d = u.Unwrap()
	}
	return nil, false
}
