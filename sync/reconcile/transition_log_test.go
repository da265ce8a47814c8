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
// transition reported for the metric carries the same names, and once in
// service the server leaves from gated, not from drain: one name per state.
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
	if len(reported) != 1 || reported[0].To != "gated" || reported[0].Reason != "awaiting-check" {
		t.Errorf("transitions reported %+v, want one to gated, awaiting-check", reported)
	}
	if res.Targets[0].Servers["gated"] != 1 || res.Targets[0].Servers["drain"] != 0 {
		t.Errorf("servers by state %v, want the one gated", res.Targets[0].Servers)
	}

	// The in-memory driver shows no check: the next reconcile puts the
	// server in service, as a passed check would.
	logs.Reset()
	if _, err := rec.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	lines = nil
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var line struct{ Msg, From, To string }
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "server transition" {
			lines = append(lines, line.From+">"+line.To)
		}
	}
	if len(lines) != 1 || lines[0] != "gated>ready" {
		t.Errorf("exit logged %q, want [gated>ready]", lines)
	}
	if len(reported) != 2 || reported[1].From != "gated" || reported[1].To != "ready" {
		t.Errorf("exit reported %+v, want from gated to ready", reported[1:])
	}
}
