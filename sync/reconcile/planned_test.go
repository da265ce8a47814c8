package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestDryRunPlanShowsAddressStateAndWeight: a dry run's result lists each
// change with the server's address:port, state and weight before and after,
// not only its name; a real run does not carry it.
func TestDryRunPlanShowsAddressStateAndWeight(t *testing.T) {
	d := &reconciletest.Driver{}
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	r := reconciler(src, d)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	src.In = cluster("10.244.0.2")
	res, err := r.Reconcile(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(res.Targets[0].Plan)
	want := `[{"server":"10-244-0-1","action":"delete","from":{"address":"10.244.0.1:8080","state":"ready","weight":1}},` +
		`{"server":"10-244-0-2","action":"add","to":{"address":"10.244.0.2:8080","state":"ready","weight":1}}]`
	if string(got) != want {
		t.Errorf("plan\n got %s\nwant %s", got, want)
	}
	res, err = r.Reconcile(context.Background(), false)
	if err != nil || res.Targets[0].Plan != nil {
		t.Errorf("a real run carries a plan: %v %+v", err, res.Targets[0].Plan)
	}
}

// TestSourceClassReachesTheResult: a Kubernetes read keeps the source's own
// class (a manifests file without the Service is permanent); an unclassed
// failure stays temporary.
func TestSourceClassReachesTheResult(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want failure.Class
	}{
		{&failure.InputError{Err: errors.New("service ingress/web in dump.yaml: service not found")}, failure.Permanent},
		{errors.New("the server is currently unable to handle the request"), failure.Temporary},
	} {
		r := reconciler(&desiredtest.Source{Err: fmt.Errorf("read: %w", tt.err)}, &reconciletest.Driver{})
		res, err := r.Reconcile(context.Background(), true)
		if err == nil || res.ErrorClass != tt.want || res.Status != reconcile.StatusError {
			t.Errorf("%v: class %q, want %q (%v)", tt.err, res.ErrorClass, tt.want, err)
		}
	}
}
