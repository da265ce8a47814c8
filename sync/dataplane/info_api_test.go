package dataplane_test

import (
	"context"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
)

// TestProcessInfoThroughTheAPI: the driver reads the process the API
// reports, within the spec (the test API fails the test otherwise).
func TestProcessInfoThroughTheAPI(t *testing.T) {
	_, c := setup(t, dataplanetest.Options{Username: "u", Password: "p"}, dataplane.Auth{Username: "u", Password: "p"})
	p, err := c.ProcessInfo(context.Background())
	if err != nil || p.PID != dataplanetest.SyntheticPID || p.Node != dataplanetest.SyntheticNode || !p.HasUptime {
		t.Errorf("ProcessInfo = %+v, %v", p, err)
	}
}
