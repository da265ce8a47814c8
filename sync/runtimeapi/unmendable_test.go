package runtimeapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestBackendHAProxyDoesNotHave: a real HAProxy asked for a backend it
// does not run answers "Can't find backend." (2.6 as 3.x): the read, and
// the check polls, fail with a permanent BackendError naming it and what
// to set.
func TestBackendHAProxyDoesNotHave(t *testing.T) {
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be", Lines: []string{"balance roundrobin"}})
	c := mustNew(t, h.RuntimeURL())
	_, err := c.Read(context.Background(), "nope")
	var be *failure.BackendError
	if !errors.As(err, &be) || be.Backend != "nope" || failure.Of(err) != failure.Permanent || !strings.Contains(err.Error(), "HAPROXY_BACKEND_NAME") {
		t.Errorf("read: %v (%s), want a permanent BackendError for nope", err, failure.Of(err))
	}
	if _, err := c.ReadChecks(context.Background(), "nope"); !errors.As(err, &be) {
		t.Errorf("check read: %v, want a BackendError", err)
	}
}
