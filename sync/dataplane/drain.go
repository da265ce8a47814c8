package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// toShut names the servers of structural (the transaction's changes) whose
// sessions must be shut before the transaction deletes them: deletions of
// servers parked past the drain timeout (plan.Change.Kill), when the
// instance's runtime socket is there (WithRuntime). It decides with no I/O.
//
// The transaction's DELETE only rewrites haproxy.cfg; the commit's reload
// starts a worker without the server and leaves the old worker serving its
// sessions. So, as the runtime API driver sends "shutdown sessions server"
// before "del server", the socket shuts them before the transaction, while
// the running HAProxy still holds the server (after a reload the socket
// reaches the new worker, which does not).
//
// Without the socket no plan asks for it: the driver cannot see sessions
// (Read leaves model.Runtime nil), so an unwanted server is free at once,
// never killed, and goes with its batch. Its sessions then end the way a
// reload ends any: the old worker serves them until they close, or until
// HAProxy's hard-stop-after (when haproxy.cfg sets it) stops that worker;
// HAPROXY_DRAIN_TIMEOUT has no effect there.
//
// A deletion of a server only the running HAProxy holds (a burst's, not
// persisted) is not in structural: it goes to the runtime API driver
// (routes.onSocket), which shuts its sessions itself.
func toShut(structural []plan.Change, socket bool) []string {
	if !socket {
		return nil
	}
	var names []string
	for _, ch := range structural {
		if ch.Action == plan.Delete && ch.Kill {
			names = append(names, ch.Name)
		}
	}
	return names
}

// shutExpired shuts, through the socket, the sessions of the servers the
// transaction deletes past their drain timeout (toShut), and returns the
// transaction's changes without the deletions of servers whose shutdown the
// socket refused: those are recorded in failed, left parked, and the next
// reconcile reads them again. Any other error ends the apply before the
// transaction.
func (c *Client) shutExpired(ctx context.Context, backend string, structural []plan.Change, out *plan.Applied, failed *plan.ServerErrors) ([]plan.Change, error) {
	refused := map[string]bool{}
	for _, name := range toShut(structural, c.runtime != nil) {
		err := c.runtime.ShutdownSessions(ctx, backend, name)
		var one plan.ServerErrors
		switch {
		case err == nil:
			out.Count(plan.RuntimeWrite)
		case errors.As(err, &one):
			*failed = append(*failed, one...)
			refused[name] = true
		default:
			return structural, fmt.Errorf("shut sessions of server %s/%s: %w", backend, name, err)
		}
	}
	return without(structural, refused), nil
}
