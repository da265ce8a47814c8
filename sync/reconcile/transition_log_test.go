package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestGatedServerIsLoggedAsGated: a new server held out of traffic until its
// check passes is logged as what it is, to=gated reason=awaiting-check, not
// to=drain reason=check, which reads as a server being taken out; the
// transition reported for the metric keeps its labels (drain, check).
func TestGatedServerIsLoggedAsGated(t *testing.T) {
	var logs bytes.Buffer
	rec := reconciletest.Reconciler(&desiredtest.Source{In: desiredtest.PodCluster("ingress", "web", "10.244.0.1")},
		&reconciletest.Driver{Pol: plan.Policy{GateChecks: true}})
	rec.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	var reported []reconcile.Transition
	rec.OnTransition = func(tr reconcile.Transition) { reported = append(reported, tr) }
	res, err := rec.Reconcile(context.Background(), false)
	if err != nil || len(res.Targets) != 1 || len(res.Targets[0].Waiting) != 1 {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var line struct{ Msg, From, To, Reason string }
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "server transition" {
			lines = append(lines, line.From+">"+line.To+" "+line.Reason)
		}
	}
	if len(lines) != 1 || lines[0] != "absent>gated awaiting-check" {
		t.Errorf("transitions logged %q, want [absent>gated awaiting-check]", lines)
	}
	if len(reported) != 1 || reported[0].To != "drain" || reported[0].Reason != "check" {
		t.Errorf("transitions reported %+v, want one to drain for check", reported)
	}
}
