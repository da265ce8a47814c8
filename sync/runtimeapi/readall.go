package runtimeapi

import (
	"context"
	"strings"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// ReadAll reads every backend in two commands ("show servers state" and
// "show stat" of all), where Read asks two per backend: what a full
// reconcile of many Services reads once (reconcile.BulkReader). A backend
// with no server is not in the answer, as one HAProxy does not have is not:
// the caller reads those with Read, which tells them apart.
func (c *Client) ReadAll(ctx context.Context) (map[string]model.Backend, error) {
	const stateCmd, statCmd = "show servers state", "show stat -1 4 -1"
	state, err := c.sock.Command(ctx, stateCmd)
	if err != nil {
		return nil, err
	}
	stat, err := c.sock.Command(ctx, statCmd)
	if err != nil {
		return nil, err
	}
	stateHead, states := byBackend(state, 2, ' ', 1)
	statHead, stats := byBackend(stat, 1, ',', 0)
	out := make(map[string]model.Backend, len(states))
	for backend, lines := range states {
		servers, err := ParseServersState(stateHead+lines, backend, c.check.Rise, c.check.Fall)
		if err != nil {
			return nil, &CommandError{Command: stateCmd, Reply: err.Error()}
		}
		st, err := ParseStat(statHead+stats[backend], backend)
		if err != nil {
			return nil, &CommandError{Command: statCmd, Reply: err.Error()}
		}
		c.complete(servers, st)
		servers, idle := splitIdle(servers)
		out[backend] = model.Backend{Name: backend, Settings: c.settings, Servers: servers, IdleSlots: idle}
	}
	return out, nil
}

// byBackend splits a reply into its first head lines and, by backend
// name (the field-th field of a line split at sep), the rest of its lines;
// comments and blank lines after the head are dropped. The parsers read
// one backend's lines after the head as they read a reply for it alone.
func byBackend(reply string, head int, sep byte, field int) (string, map[string]string) {
	out := map[string]*strings.Builder{}
	var h strings.Builder
	n := 0
	for line := range strings.Lines(reply) {
		if n < head {
			h.WriteString(line)
			n++
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		var name string
		if sep == ' ' {
			if f := strings.Fields(t); len(f) > field {
				name = f[field]
			}
		} else if f := strings.SplitN(t, string(sep), field+2); len(f) > field {
			name = f[field]
		}
		if name == "" {
			continue
		}
		b, ok := out[name]
		if !ok {
			b = &strings.Builder{}
			out[name] = b
		}
		b.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	m := make(map[string]string, len(out))
	for k, b := range out {
		m[k] = b.String()
	}
	return h.String(), m
}
