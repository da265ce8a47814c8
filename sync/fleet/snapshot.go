package fleet

import (
	"context"
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
	backends := f.readAll(ctx)
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
		out[k] = &reconcile.Snapshot{ReadAt: readAt, Input: in, Backend: find}
	}
	return out
}

// readAll reads every backend of each target whose driver reads them at
// once, all targets at a time; a target that cannot, or failed, is left
// out (its backends are read one by one).
func (f *Fleet) readAll(ctx context.Context) map[string]map[string]model.Backend {
	out := map[string]map[string]model.Backend{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range f.Template.Targets {
		br, ok := reconcile.BulkOf(t)
		if !ok {
			continue
		}
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	return out
}
