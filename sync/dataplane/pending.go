package dataplane

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// pendingWait bounds how long a reconcile waits for the API's scheduled
// reload (its reload_delay is 5 s by default).
const pendingWait = 15 * time.Second

// awaitPendingRemoval: a server p adds may run in HAProxy already though
// haproxy.cfg lacks it and this service did not add it through the socket
// (Read hides it). Someone else's, or one haproxy.cfg no longer holds and
// a reload the API has scheduled is to remove — a deletion this service
// asked for before it restarted (a crash, a new pod, the one-shot command
// after serve). Adding it now collides with the running one: the socket
// refuses it, and the API falls back to a reload for its POST. So when the
// API has a reload in progress, Apply waits for it and answers a conflict:
// the reconcile reads again, with that reload done. With none in progress
// the server is someone else's (addAtRuntime leaves it).
func (c *Client) awaitPendingRemoval(ctx context.Context, p plan.Plan) error {
	v, _ := c.hidden.Load(p.Backend)
	hidden, _ := v.([]string)
	var names []string
	for _, ch := range p.Changes {
		if ch.Action == plan.Add && slices.Contains(hidden, ch.Name) {
			names = append(names, ch.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pendingWait)
	defer cancel()
	waited := false
	for {
		pending, err := c.reloadPending(ctx)
		if err != nil && !waited {
			// An API that cannot say (an older one, a proxy in front):
			// the name is taken for someone else's, as before.
			return nil
		}
		if err != nil {
			return err
		}
		if !pending {
			break
		}
		waited = true
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the Data Plane API's reload before adding %s: %w", strings.Join(names, ", "), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !waited {
		return nil
	}
	c.hidden.Delete(p.Backend)
	return &failure.ConflictError{Msg: fmt.Sprintf("%s ran in HAProxy, not in haproxy.cfg, while the Data Plane API had a reload in progress: waited for it, to read again", strings.Join(names, ", "))}
}

// reloadPending says whether the API has a reload scheduled or running
// (GET /services/haproxy/reloads lists it "in_progress").
func (c *Client) reloadPending(ctx context.Context) (bool, error) {
	var rs []models.Reload
	if _, err := c.do(ctx, http.MethodGet, "/reloads", nil, nil, &rs); err != nil {
		return false, fmt.Errorf("read the Data Plane API's reloads: %w", err)
	}
	return slices.ContainsFunc(rs, func(r models.Reload) bool { return r.Status == models.ReloadStatusInProgress }), nil
}

// settingsLoading says whether backend's settings this process committed
// may not run yet: the API's reload for them is in progress, or the API
// cannot say. Meanwhile a server haproxy.cfg holds and HAProxy does not
// run is not added through the socket: it would run the backend's old
// check — a TCP connect to kube-proxy's health port, which passes however
// the Node is (history seed 1, node mode, Data Plane driver,
// HAPROXY_BALANCE with the Service's healthCheckNodePort) — until the
// reload loads it with the new one.
func (c *Client) settingsLoading(ctx context.Context, backend string) bool {
	gen, ok := c.settingsWritten.Load(backend)
	if !ok {
		return false
	}
	pending, err := c.reloadPending(ctx)
	if err == nil && !pending {
		// Not one a later commit stored meanwhile.
		c.settingsWritten.CompareAndDelete(backend, gen)
	}
	return err != nil || pending
}
