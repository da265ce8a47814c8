package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// runtimeAll is a Runtime that reads every backend's running servers at
// once (*runtimeapi.Client: two commands for all).
type runtimeAll interface {
	ReadRuntimeAll(ctx context.Context) (map[string][]model.Server, error)
}

// ReadAll reads every backend of haproxy.cfg with its servers in one
// request (full_section) and, with a runtime socket that can, the running
// state of all in two commands: what a full reconcile of many Services
// reads of a Data Plane target once (reconcile.BulkReader), where Read
// costs two requests and two commands per backend. Each backend is as Read
// would return it. Left out, to be read alone (which says why): a backend
// Read would refuse (a balance that cannot take runtime servers, a server
// it cannot decode), one without servers in the answer (empty, or an API
// that ignores full_section), and, with the socket, one the running
// HAProxy does not show (no server, or not loaded yet: Read tells them
// apart).
func (c *Client) ReadAll(ctx context.Context) (map[string]model.Backend, error) {
	var raws []json.RawMessage
	r, err := c.do(ctx, http.MethodGet, "/configuration/backends", url.Values{"full_section": {"true"}}, nil, &raws)
	if err != nil {
		return nil, fmt.Errorf("read backends: %w", err)
	}
	var running map[string][]model.Server
	if c.runtime != nil {
		bulk, ok := c.runtime.(runtimeAll)
		if ok {
			if running, err = bulk.ReadRuntimeAll(ctx); err != nil {
				return nil, fmt.Errorf("read runtime state: %w", err)
			}
		}
	}
	defaults := map[string]*models.Defaults{}
	out := make(map[string]model.Backend, len(raws))
	for _, raw := range raws {
		var be models.Backend
		var children struct {
			Servers map[string]json.RawMessage `json:"servers"`
		}
		if json.Unmarshal(raw, &be) != nil || json.Unmarshal(raw, &children) != nil || be.Name == "" {
			continue
		}
		if children.Servers == nil {
			// No servers key: an empty backend, or an API that ignores
			// full_section (it would look empty): read alone.
			continue
		}
		servers, err := namedServers(children.Servers)
		if err != nil {
			continue
		}
		rs, shown := running[be.Name]
		if c.runtime != nil && running != nil && !shown {
			continue
		}
		name := be.Name
		readRunning := func() ([]model.Server, error) {
			if running != nil {
				return rs, nil
			}
			return c.runtime.ReadRuntime(ctx, name)
		}
		b, err := c.assemble(ctx, name, &be, servers, r.version, readRunning, defaults)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		out[name] = b
	}
	return out, nil
}

// namedServers are a full_section backend's servers, by name, each with its
// name in its JSON as the servers list gives it.
func namedServers(byName map[string]json.RawMessage) ([]json.RawMessage, error) {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]json.RawMessage, 0, len(names))
	for _, n := range names {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(byName[n], &fields); err != nil {
			return nil, err
		}
		if _, ok := fields["name"]; !ok {
			fields["name"], _ = json.Marshal(n)
			b, err := json.Marshal(fields)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
			continue
		}
		out = append(out, byName[n])
	}
	return out, nil
}
