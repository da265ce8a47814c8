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
	rs, err := c.reloads(ctx)
	if err != nil {
		return false, err
	}
	return reloadPendingIn(rs, ""), nil
}

// reloads reads the API's reloads (GET /services/haproxy/reloads).
func (c *Client) reloads(ctx context.Context) ([]models.Reload, error) {
	var rs []models.Reload
	if _, err := c.do(ctx, http.MethodGet, "/reloads", nil, nil, &rs); err != nil {
		return nil, fmt.Errorf("read the Data Plane API's reloads: %w", err)
	}
	return rs, nil
}

// settingsMark is what settingsWritten keeps of a commit that wrote a
// backend's settings: its mark, and the reload the commit scheduled or
// joined ("" when the API did not say, or the answer was lost).
type settingsMark struct {
	gen      int64
	reloadID string
}

// settingsLoading says whether backend's settings this process committed
// may not run yet: the API's reload for them is in progress, or the API
// cannot say. Meanwhile a server haproxy.cfg holds and HAProxy does not
// run is not added through the socket: it would run the backend's old
// check — a TCP connect to kube-proxy's health port, which passes however
// the Node is (history seed 1, node mode, Data Plane driver,
// HAPROXY_BALANCE with the Service's healthCheckNodePort) — until the
// reload loads it with the new one.
//
// The commit's own reload is what is waited for, by its Reload-ID: a
// later reload in progress (an API that reloads for every write) is not.
// Waiting for none to be in progress kept the mark for good under such an
// API, and every server a reload dropped waited for the next reload
// parked (seed 821716727, serve-services, Data Plane API whose runtime
// writes fail).
func (c *Client) settingsLoading(ctx context.Context, backend string) bool {
	v, ok := c.settingsWritten.Load(backend)
	if !ok {
		return false
	}
	mark := v.(settingsMark)
	rs, err := c.reloads(ctx)
	if err != nil {
		return true
	}
	pending := reloadPendingIn(rs, mark.reloadID)
	if !pending {
		// Not one a later commit stored meanwhile.
		c.settingsWritten.CompareAndDelete(backend, v)
	}
	return pending
}

// reloadPendingIn says whether rs (the API's reloads) list reload id in
// progress; for id "" (not known), whether any is.
func reloadPendingIn(rs []models.Reload, id string) bool {
	return slices.ContainsFunc(rs, func(r models.Reload) bool {
		return r.Status == models.ReloadStatusInProgress && (id == "" || r.ID == id)
	})
}
