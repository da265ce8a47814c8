package dataplane_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// The runtime API driver is the socket main gives the Data Plane driver.
var _ dataplane.Runtime = (*runtimeapi.Client)(nil)

func (h *healthLog) ShutdownSessions(_ context.Context, backend, server string) error {
	if h.refuse[server] {
		return plan.ServerErrors{{Server: server, Error: "No such server."}}
	}
	h.shut = append(h.shut, backend+"/"+server)
	h.shutAt = append(h.shutAt, len(h.api.Requests()))
	delete(h.sessions, server)
	return nil
}

// drainTimeout is HAPROXY_DRAIN_TIMEOUT in these tests.
const drainTimeout = time.Minute

// syncDraining reads, plans under the client's policy with drain timeout
// timeout (as the reconciler sets it) and applies once.
func syncDraining(t *testing.T, c *dataplane.Client, w model.Backend, timeout time.Duration) (plan.Plan, plan.Applied, error) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.Read(ctx, "be")
	if err != nil {
		t.Fatal(err)
	}
	pol := c.Policy()
	pol.DrainTimeout = timeout
	p := plan.CalculateWith(cur, w, pol)
	a, err := c.Apply(ctx, p)
	return p, a, err
}

// expiringServer sets up node-a and node-b in service, deletions batched as
// shipped (HAPROXY_DELETE_BATCH=10), then removes node-b while it has
// sessions: it is parked and listed as draining, 30 s before its drain
// timeout.
func expiringServer(t *testing.T) (*dataplanetest.Server, *healthLog, *dataplane.Client, model.Backend) {
	t.Helper()
	api, _ := setup(t, dataplanetest.Options{}, dataplane.Auth{})
	hl := &healthLog{api: api, passed: true}
	u, _ := url.Parse(api.URL)
	c := dataplane.New(u, dataplane.Auth{}, http.DefaultClient, dataplane.WithRuntime(hl), dataplane.WithDeleteBatch(10))
	both := want(srv("node-a", "127.0.1.1", model.Ready), srv("node-b", "127.0.1.2", model.Ready))
	syncOnce(t, c, both)
	syncOnce(t, c, both)
	if in, all := persisted(api); in != 2 || all != 2 {
		t.Fatalf("set-up: %d of %d in service", in, all)
	}
	hl.sessions, hl.since = map[string]int{"node-b": 3}, drainTimeout/2
	one := want(srv("node-a", "127.0.1.1", model.Ready))
	for range 2 {
		p, _, err := syncDraining(t, c, one, drainTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Names(plan.Delete)) != 0 || !reflect.DeepEqual(p.Draining, []string{"node-b"}) {
			t.Fatalf("within the drain timeout: %v, draining %v; want node-b parked and draining", p.Changes, p.Draining)
		}
	}
	if in, all := persisted(api); in != 1 || all != 2 || len(hl.shut) != 0 {
		t.Fatalf("set-up: %d of %d in service, sessions shut of %v", in, all, hl.shut)
	}
	return api, hl, c, one
}

// TestExpiredServerIsShutThenDeleted (issue 43, defect 5): a server parked
// past HAPROXY_DRAIN_TIMEOUT alone, far from the shipped batch of 10, is
// deleted by the next reconcile, its sessions shut through the socket
// before the transaction that deletes it (its reload would leave them to
// the old worker). Before, it was never deleted and its sessions never
// shut.
func TestExpiredServerIsShutThenDeleted(t *testing.T) {
	api, hl, c, one := expiringServer(t)
	hl.since = 2 * drainTimeout
	before, reloads := len(api.Requests()), api.Reloads()
	p, a, err := syncDraining(t, c, one, drainTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Names(plan.Delete), []string{"node-b"}) || !p.Changes[0].Kill || len(p.Draining) != 0 {
		t.Fatalf("past the drain timeout: deleted %v, draining %v; want node-b deleted, its sessions shut", p.Names(plan.Delete), p.Draining)
	}
	if !reflect.DeepEqual(hl.shut, []string{"be/node-b"}) {
		t.Fatalf("sessions shut of %v, want be/node-b", hl.shut)
	}
	reqs := api.Requests()
	for i, r := range reqs[before:] {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/transactions") && before+i < hl.shutAt[0] {
			t.Errorf("the transaction started before the sessions were shut")
		}
	}
	if got := api.Servers("be"); len(got) != 1 || got[0].Name != "node-a" || !a.Reload || api.Reloads() != reloads+1 {
		t.Errorf("haproxy.cfg holds %v after %d reloads (reported %v), want node-a alone after one", got, api.Reloads()-reloads, a.Reload)
	}
	if p, a, err := syncDraining(t, c, one, drainTimeout); err != nil || p.HasChanges() || p.Pending() || a.Writes != 0 {
		t.Errorf("after: changes %v, pending %v, %d writes, %v", p.Changes, p.Pending(), a.Writes, err)
	}
}

// TestExpiredServerWhoseSessionsCannotBeShutStays: the socket refuses to
// shut the sessions (the running HAProxy no longer has the server): the
// server is not deleted, the refusal is reported for it, and no
// transaction runs for it.
func TestExpiredServerWhoseSessionsCannotBeShutStays(t *testing.T) {
	api, hl, c, one := expiringServer(t)
	hl.since = 2 * drainTimeout
	hl.refuse = map[string]bool{"node-b": true}
	reloads := api.Reloads()
	_, _, err := syncDraining(t, c, one, drainTimeout)
	var refused plan.ServerErrors
	if !errors.As(err, &refused) || len(refused) != 1 || refused[0].Server != "node-b" {
		t.Fatalf("apply: %v, want node-b refused", err)
	}
	if _, all := persisted(api); all != 2 || api.Reloads() != reloads {
		t.Errorf("haproxy.cfg holds %d servers after %d reloads, want node-b kept, no reload", all, api.Reloads()-reloads)
	}
}
