package fleet

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Settle is the one-shot reconcile's follow-up (what a CronJob or a
// Knative event runs, with no lanes to finish its work): after res, a full
// reconcile, it reconciles again the Services whose servers wait (for their
// first passed check, their sessions, a hand-over) and the left backends
// with work left, until none has or ctx ends, and returns res with their
// latest results, and err, res's error, as they say now. Else a scale-up's
// gated servers stayed out of traffic until the next run, a minute or more
// later. A Service no longer selected meanwhile is left as it was.
//
// Each Service is followed as a lane follows it (reconcile.FollowUp): the
// checks of its waiting servers are read every poll where a target has a
// check reader (checks, by Driver.Name), and it is reconciled when one
// passed; what waits otherwise (sessions, a hand-over, a target with no
// reader) a second later at most; one waiting for HAProxy to load its
// frontend every poll. A reconcile of every pending Service every poll read
// Kubernetes and HAProxy ten times a second for each, and, beside a writer
// of another configuration, deleted its servers as fast as it added them:
// a Service whose servers another writer deletes (reconcile.FollowUp's
// contested servers) is not followed further.
func (f *Fleet) Settle(ctx context.Context, res Result, err error, poll time.Duration, checks map[string]reconcile.CheckReader) (Result, error) {
	gone := map[string]bool{}
	follows := map[string]*reconcile.FollowUp{}
	defer func() {
		for _, fu := range follows {
			fu.Stop()
		}
	}()
	var mu sync.Mutex
	woken, contested := map[string]bool{}, map[string]bool{}
	signal := make(chan struct{}, 1)
	wake := func(key string) func(string) {
		return func(string) {
			mu.Lock()
			woken[key] = true
			mu.Unlock()
			select {
			case signal <- struct{}{}:
			default:
			}
		}
	}
	var sweepAt time.Time
	fresh := map[string]bool{} // reconciled last round: their FollowUp is told
	for _, s := range res.Services {
		fresh[s.Service] = true
	}
	for {
		var keys []string
		loading := false
		for _, s := range res.Services {
			if !s.Pending() || s.Status == reconcile.StatusError || gone[s.Service] {
				continue
			}
			keys = append(keys, s.Service)
			loading = loading || s.Loading != ""
			if fresh[s.Service] {
				fu := follows[s.Service]
				if fu == nil {
					key, ping := s.Service, wake(s.Service)
					fu = &reconcile.FollowUp{Checks: checks, Poll: poll, Log: f.Log, OnContested: func(string, []string) {
						mu.Lock()
						contested[key] = true
						mu.Unlock()
						ping("contested")
					}}
					follows[s.Service] = fu
				}
				fu.Observe(s.Result, nil, wake(s.Service))
			}
		}
		var left []string
		for _, l := range res.Left {
			if l.Status != reconcile.StatusError && !finished(l.Result) {
				left = append(left, l.Backend)
			}
		}
		if len(keys) == 0 && len(left) == 0 {
			return res, err
		}
		// The sweep (every Service that waits, and the left backends) comes
		// a second after the last one however often passed checks wake
		// single Services meanwhile; every poll while a reload is awaited.
		if sweepAt.IsZero() {
			sweepAt = time.Now().Add(time.Second)
		}
		limit := time.Until(sweepAt)
		if loading {
			limit = min(limit, poll)
		}
		t := time.NewTimer(limit)
		timedOut := false
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-signal:
		case <-t.C:
			timedOut = true
		}
		t.Stop()
		mu.Lock()
		run := woken
		woken = map[string]bool{}
		for k := range contested {
			// Another writer deletes what this run adds: it runs on (a
			// serve, maybe with a newer configuration); this run yields
			// (reconcile's contested.go): the Service is left waiting in
			// the result.
			if !gone[k] {
				gone[k] = true
				follows[k].Stop()
			}
			delete(run, k)
		}
		mu.Unlock()
		sweep := timedOut && !time.Now().Before(sweepAt)
		for _, s := range res.Services {
			if timedOut && s.Loading != "" && slices.Contains(keys, s.Service) {
				run[s.Service] = true
			}
		}
		if sweep {
			sweepAt = time.Time{}
			for _, k := range keys {
				if !gone[k] {
					run[k] = true
				}
			}
		}
		fresh = map[string]bool{}
		for _, k := range keys {
			if !run[k] {
				continue
			}
			fresh[k] = true
			again, _ := f.ReconcileService(ctx, k, false)
			if !slices.ContainsFunc(again.Services, func(s ServiceResult) bool { return s.Service == k }) {
				gone[k] = true // not selected any more, or Kubernetes unread: not followed further
			}
			res.Services = replace(res.Services, again.Services)
		}
		if len(left) > 0 && sweep {
			again, _ := f.ReconcileLeft(ctx, left)
			for _, l := range again.Left {
				if i := slices.IndexFunc(res.Left, func(x LeftResult) bool { return x.Backend == l.Backend }); i >= 0 {
					res.Left[i] = l
				}
			}
			res.Services = replace(res.Services, again.Services)
			for _, s := range again.Services {
				fresh[s.Service] = true
			}
		}
		status := res.Status
		err = summarize(&res, false, true)
		if status == reconcile.StatusApplied {
			res.Status = status
		}
	}
}

// replace puts each of got in place of the result of its Service in rs (or
// adds it), in key order.
func replace(rs, got []ServiceResult) []ServiceResult {
	for _, g := range got {
		if i := slices.IndexFunc(rs, func(s ServiceResult) bool { return s.Service == g.Service }); i >= 0 {
			rs[i] = g
		} else {
			rs = append(rs, g)
		}
	}
	slices.SortFunc(rs, func(a, b ServiceResult) int { return strings.Compare(a.Service, b.Service) })
	return rs
}
