package fleet

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Settle is the one-shot reconcile's follow-up (what a CronJob or a
// Knative event runs, with no lanes to finish its work): after res, a full
// reconcile, it reconciles again every poll the Services whose servers
// wait (for their first passed check, their sessions, a hand-over) and the
// left backends with work left, until none has or ctx ends, and returns
// res with their latest results, and err, res's error, as they say now.
// Else a scale-up's gated servers stayed out of traffic until the next run,
// a minute or more later. A Service no longer selected meanwhile is left as
// it was.
func (f *Fleet) Settle(ctx context.Context, res Result, err error, poll time.Duration) (Result, error) {
	gone := map[string]bool{}
	for {
		var keys []string
		for _, s := range res.Services {
			if s.Pending() && s.Status != reconcile.StatusError && !gone[s.Service] {
				keys = append(keys, s.Service)
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
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(poll):
		}
		for _, k := range keys {
			again, _ := f.ReconcileService(ctx, k, false)
			if !slices.ContainsFunc(again.Services, func(s ServiceResult) bool { return s.Service == k }) {
				gone[k] = true // not selected any more, or Kubernetes unread: not followed further
			}
			res.Services = replace(res.Services, again.Services)
		}
		if len(left) > 0 {
			again, _ := f.ReconcileLeft(ctx, left)
			for _, l := range again.Left {
				if i := slices.IndexFunc(res.Left, func(x LeftResult) bool { return x.Backend == l.Backend }); i >= 0 {
					res.Left[i] = l
				}
			}
			res.Services = replace(res.Services, again.Services)
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
