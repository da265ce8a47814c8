package history

import (
	"encoding/json"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// TestFleetOneShotResult: what the reconcile command prints in
// many-Services mode is read as a writer's result: every Service's
// targets, a failed one's error naming its Service, so that
// failures-explained judges the command's failures there too.
func TestFleetOneShotResult(t *testing.T) {
	out, err := json.Marshal(fleet.Result{Status: reconcile.StatusError, Error: "services failed: 1 of 2", Services: []fleet.ServiceResult{
		{Service: "ns/web", Result: reconcile.Result{Targets: []reconcile.TargetResult{{Target: "east"}}}},
		{Service: "ns/web2", Result: reconcile.Result{Targets: []reconcile.TargetResult{{Target: "east", Error: "read servers: timeout"}}}},
	}, Left: []fleet.LeftResult{{Backend: "be3", Result: reconcile.Result{Targets: []reconcile.TargetResult{{Target: "east", Error: "del server: refused"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := fleetOneShot(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Targets) != 3 || res.Targets[0].Error != "" || res.Targets[1].Error != "ns/web2: read servers: timeout" ||
		res.Targets[2].Error != "left backend be3: del server: refused" {
		t.Errorf("targets %+v: want the Services' and the left backend's, each failed one's error naming it", res.Targets)
	}
	if res.Error != "services failed: 1 of 2" || res.Status != reconcile.StatusError {
		t.Errorf("status %q error %q: want the fleet's", res.Status, res.Error)
	}
	if _, err := fleetOneShot([]byte("not json")); err == nil {
		t.Error("no result printed: no error")
	}
}
