package fleet

import (
	"cmp"
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// snapshots reads, for a full reconcile, every target's backends at once
// (where its driver can) and then Kubernetes once (Inputs), in the order a
// reconcile reads them, and returns each Service job's Snapshot. Nothing
// when Inputs is not set or its read failed: each Service then reads its
// own, as before.
func (f *Fleet) snapshots(ctx context.Context, all []corev1.Service, jobs []job) map[string]*reconcile.Snapshot {
	if f.Inputs == nil || f.Gate != nil {
		return nil // the readiness gate's Reconcilers read their own pods: no snapshot
	}
	want := map[string]bool{}
	for _, j := range jobs {
		if j.svc != nil {
			want[j.svc.Key()] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	readAt := time.Now() // before any read: a fresh reconcile since makes it stale for its Service
	backends, unread := f.readAll(ctx)
	var svcs []corev1.Service
	for i := range all {
		if want[all[i].Namespace+"/"+all[i].Name] {
			svcs = append(svcs, all[i])
		}
	}
	inputs, err := f.Inputs.Inputs(ctx, svcs)
	if err != nil {
		if f.Log != nil {
			f.Log.Debug("one read for every Service failed; each reads its own", "error", err)
		}
		return nil
	}
	find := func(target, backend string) (model.Backend, bool) {
		b, ok := backends[target][backend]
		return b, ok
	}
	out := make(map[string]*reconcile.Snapshot, len(inputs))
	for k, in := range inputs {
		out[k] = &reconcile.Snapshot{ReadAt: readAt, Input: in, Backend: find, Unread: unread}
	}
	return out
}

// readAll reads every backend of each target whose driver reads them at
// once, all targets at a time (one that cannot is read backend by backend,
// as before). A target whose read failed, had not answered a straggle
// after another did, or is still in flight from an earlier full reconcile
// is unread: its Services reconcile afresh, where a hung target is left
// behind (reconcile.Snapshot.Unread). Before, a hung HAProxy of a pair
// (its pair check's and a request's timeouts) held every Service's
// reconcile on the one that answered (history seed 682573831, class,
// HAProxy 2.6: a Service moved to another port had no server there 21 s).
func (f *Fleet) readAll(ctx context.Context) (backends map[string]map[string]model.Backend, unread map[string]bool) {
	out, asked := map[string]map[string]model.Backend{}, map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	answered := make(chan struct{}, len(f.Template.Targets))
	for _, t := range f.Template.Targets {
		br, ok := reconcile.BulkOf(t)
		if !ok {
			continue
		}
		asked[t.Name()] = true
		if reconcile.BehindOf(ctx)[t.Name()] || !f.startReading(t.Name()) {
			continue
		}
		wg.Go(func() {
			defer f.doneReading(t.Name())
			got, err := br.ReadAll(ctx)
			if err != nil {
				if f.Log != nil {
					f.Log.Warn("one read of every backend failed; each Service reads its own", "target", t.Name(), "error", err)
				}
				return
			}
			mu.Lock()
			out[t.Name()] = got
			mu.Unlock()
			answered <- struct{}{}
		})
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
	case <-answered:
		t := time.NewTimer(cmp.Or(f.Template.Straggle, 3*time.Second))
		select {
		case <-all:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	mu.Lock()
	defer mu.Unlock()
	unread = map[string]bool{}
	for name := range asked {
		if _, ok := out[name]; !ok {
			unread[name] = true
		}
	}
	return maps.Clone(out), unread
}

// startReading marks target's bulk read in flight, false when one is.
func (f *Fleet) startReading(target string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reading[target] {
		return false
	}
	if f.reading == nil {
		f.reading = map[string]bool{}
	}
	f.reading[target] = true
	return true
}

func (f *Fleet) doneReading(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.reading, target)
}
