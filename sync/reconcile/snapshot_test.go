package reconcile_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestSnapshotNeverDrivesAWrite: a Reconcile given a Snapshot (a full
// reconcile's one read of every kind) that plans nothing is done from it:
// no read of its own, no lock (another reconcile holds it), the result a
// fresh reconcile gives. One whose snapshot plans a write reads afresh,
// under the lock, and writes what the fresh reads say, not what the
// snapshot said. With the readiness gate the snapshot is not used.
func TestSnapshotNeverDrivesAWrite(t *testing.T) {
	d := &reconciletest.Driver{}
	src := desiredtest.NewLive(cluster("10.244.0.1", "10.244.0.2"))
	locks := &reconcile.Locks{}
	r := reconciler(src, d)
	r.Locks = locks
	fresh, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ = r.Reconcile(context.Background(), false) // unchanged
	read := func(_, backend string) (model.Backend, bool) {
		b, err := d.Read(context.Background(), backend)
		return b, err == nil
	}
	snap := func(in []string) *reconcile.Snapshot {
		return &reconcile.Snapshot{ReadAt: time.Now(), Input: cluster(in...), Backend: read}
	}

	// Nothing to write: done from the snapshot, while another holds the lock.
	unlock, err := locks.Lock(context.Background(), d.Name())
	if err != nil {
		t.Fatal(err)
	}
	reads, _, _ := d.Counts()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := r.Reconcile(reconcile.WithSnapshot(ctx, snap([]string{"10.244.0.1", "10.244.0.2"})), false)
	unlock()
	if err != nil || res.Status != reconcile.StatusUnchanged {
		t.Fatalf("a no-op from the snapshot: %v %s (waited for the lock?)", err, res.Status)
	}
	if got, _, _ := d.Counts(); got != reads+1 { // the snapshot's Backend reads through d here
		t.Errorf("%d reads of the driver beyond the snapshot's, want none", got-reads-1)
	}
	if !slices.Equal(res.Targets[0].Add, fresh.Targets[0].Add) || !maps.Equal(res.Targets[0].Servers, fresh.Targets[0].Servers) {
		t.Errorf("from the snapshot %+v, fresh %+v", res.Targets[0], fresh.Targets[0])
	}

	// The snapshot says a pod came (10.244.0.3); Kubernetes, read afresh,
	// says another (10.244.0.4): the write is the fresh one's.
	src.Set(cluster("10.244.0.1", "10.244.0.2", "10.244.0.4"))
	_, applies, _ := d.Counts()
	res, err = r.Reconcile(reconcile.WithSnapshot(context.Background(), snap([]string{"10.244.0.1", "10.244.0.2", "10.244.0.3"})), false)
	if err != nil || res.Status != reconcile.StatusApplied {
		t.Fatalf("a change from the snapshot: %v %s", err, res.Status)
	}
	if _, got, _ := d.Counts(); got != applies+1 {
		t.Errorf("%d applies, want one (the fresh reconcile's)", got-applies)
	}
	servers := d.Servers()
	if _, ok := servers["10-244-0-3"]; ok {
		t.Errorf("servers %v: the snapshot's pod was written", slices.Sorted(maps.Keys(servers)))
	}
	if _, ok := servers["10-244-0-4"]; !ok {
		t.Errorf("servers %v: the fresh read's pod is missing", slices.Sorted(maps.Keys(servers)))
	}
}

// TestSnapshotOlderThanAFreshReconcileIsNotUsed: a snapshot read before a
// fresh reconcile of the same Reconciler (its Service's lane wrote after
// the full pass's one read) may miss what that wrote: the Service is
// reconciled afresh, its driver read, not planned from the snapshot.
func TestSnapshotOlderThanAFreshReconcileIsNotUsed(t *testing.T) {
	d := &reconciletest.Driver{}
	r := reconciler(desiredtest.NewLive(cluster("10.244.0.1")), d)
	for range 2 {
		if _, err := r.Reconcile(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	snapAt := time.Now()
	time.Sleep(time.Millisecond)
	if _, err := r.Reconcile(context.Background(), false); err != nil { // the lane's, after the snapshot's read
		t.Fatal(err)
	}
	reads, _, _ := d.Counts()
	snap := &reconcile.Snapshot{ReadAt: snapAt, Input: cluster("10.244.0.1"), Backend: func(string, string) (model.Backend, bool) {
		t.Error("a stale snapshot was read")
		return model.Backend{}, false
	}}
	if _, err := r.Reconcile(reconcile.WithSnapshot(context.Background(), snap), false); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := d.Counts(); got != reads+1 {
		t.Errorf("%d reads of the driver, want one (afresh)", got-reads)
	}
}
