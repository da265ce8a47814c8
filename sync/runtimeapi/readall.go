package runtimeapi

import (
	"context"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// ReadAll reads every backend in two commands ("show servers state" and
// "show stat" of all), where Read asks two per backend: what a full
// reconcile of many Services reads once (reconcile.BulkReader). A backend
// with no server is not in the answer, as one HAProxy does not have is not:
// the caller reads those with Read, which tells them apart.
func (c *Client) ReadAll(ctx context.Context) (map[string]model.Backend, error) {
	all, err := c.ReadRuntimeAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]model.Backend, len(all))
	for backend, servers := range all {
		servers, idle := splitIdle(servers)
		out[backend] = model.Backend{Name: backend, Settings: c.settings, Servers: servers, IdleSlots: idle}
	}
	return out, nil
}

// ReadRuntimeAll is ReadRuntime of every backend that has a server, in the
// same two commands: the Data Plane driver's bulk read takes the running
// state from it (dataplane.Client.ReadAll).
func (c *Client) ReadRuntimeAll(ctx context.Context) (map[string][]model.Server, error) {
	const stateCmd, statCmd = "show servers state", "show stat -1 4 -1"
	state, err := c.sock.Command(ctx, stateCmd)
	if err != nil {
		return nil, err
	}
	stat, err := c.sock.Command(ctx, statCmd)
	if err != nil {
		return nil, err
	}
	all := func(string) bool { return true }
	states, err := parseServersState(state, all, c.check.Rise, c.check.Fall)
	if err != nil {
		return nil, &CommandError{Command: stateCmd, Reply: err.Error()}
	}
	stats, err := parseStat(stat, all)
	if err != nil {
		return nil, &CommandError{Command: statCmd, Reply: err.Error()}
	}
	for backend, servers := range states {
		c.complete(servers, stats[backend])
	}
	return states, nil
}
