package dataplane

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestPendingRemovalWithoutReloadsEndpoint: an API that cannot list its
// reloads (an older one, a proxy that answers 404) leaves a hidden name to
// the add as before (someone else's), rather than failing the reconcile.
// From the second reader of 0.8.8's diff.
func TestPendingRemovalWithoutReloadsEndpoint(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	u, _ := url.Parse(api.URL)
	c := New(u, Auth{}, http.DefaultClient)
	c.hidden.Store("be", []string{"s"})
	p := plan.Plan{Backend: "be", Changes: []plan.Change{{Action: plan.Add, Name: "s"}}}
	api.InjectFault(dataplanetest.Fault{PathPrefix: "/v3/services/haproxy/reloads", Status: 404})
	if err := c.awaitPendingRemoval(context.Background(), p); err != nil {
		t.Errorf("GET /reloads 404: %v, want the add to go on as before", err)
	}
}
