package handler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// reconcilerFunc is a reconcile.Runner.
type reconcilerFunc func(context.Context, bool) (reconcile.Result, error)

func (f reconcilerFunc) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	return f(ctx, dryRun)
}

// TestFailureClassReachesTheCaller: a failed reconcile answers 503 whatever
// its class (Knative retries nothing else), with its class in the JSON and a
// Retry-After that says how soon trying again may help.
func TestFailureClassReachesTheCaller(t *testing.T) {
	for _, tt := range []struct {
		class      failure.Class
		retryAfter string
	}{{failure.Temporary, "5"}, {failure.Unreachable, "5"}, {failure.Permanent, "60"}} {
		rec := reconcilerFunc(func(context.Context, bool) (reconcile.Result, error) {
			return reconcile.Result{Status: reconcile.StatusError, ErrorClass: tt.class,
				Targets: []reconcile.TargetResult{{Target: "a", Error: "x", ErrorClass: tt.class}}}, reconcile.ErrTargets
		})
		srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec}))
		resp, err := http.Post(srv.URL+"/reconcile", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var res reconcile.Result
		_ = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != tt.retryAfter ||
			res.ErrorClass != tt.class || res.Targets[0].ErrorClass != tt.class {
			t.Errorf("%s: %d, Retry-After %q, class %q / %q", tt.class, resp.StatusCode, resp.Header.Get("Retry-After"), res.ErrorClass, res.Targets[0].ErrorClass)
		}
	}
}
