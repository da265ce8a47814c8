package lb

import (
	"context"
	"errors"
	"fmt"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Holders reads back which class Service serves each port of the load
// balancer address on one target (pure): the frontends o marked, by the
// port they bind (services.PortResource) to the Service their mark names.
// A legacy mark (no class) counts where o would adopt it with no Service
// listed (legacy): the same sections Owned takes.
func Holders(held dataplane.Proxies, o Owner) map[string]string {
	out := map[string]string{}
	for _, f := range held.Frontends {
		m := parseMark(f.Description)
		if !o.Owned(f.Name, f.Description, nil) || !m.ok {
			continue
		}
		for _, b := range f.Binds {
			if b.Port > 0 && b.Port <= 65535 {
				out[services.PortResource(int32(b.Port))] = m.service
			}
		}
	}
	return out
}

// Holders reads back, from every target, which class Service each port is
// served to (Holders): what a new process (a restart, a second replica)
// selects with, so that the holder keeps its port against an older
// claimant though no previous selection of this process says it. Where
// targets disagree on a port, or one could not be read, nothing is said of
// it: age then decides between claimants that hold alike.
func (m *Manager) Holders(ctx context.Context) (map[string]string, error) {
	own := Owner{Class: m.Class, Cluster: m.Cluster, Namespaces: m.Namespaces}
	out := map[string]string{}
	conflict := map[string]bool{}
	var errs []error
	type read struct {
		held dataplane.Proxies
		err  error
	}
	reads, left := eachTarget(ctx, &m.busy, len(m.Targets), m.straggle(), func(ctx context.Context, i int) (read, bool) {
		held, err := m.Targets[i].ReadProxies(ctx)
		return read{held, err}, err == nil
	})
	for i, t := range m.Targets {
		held, err := reads[i].held, reads[i].err
		if left[i] != nil {
			err = left[i]
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", t.Name(), err))
			continue
		}
		for r, k := range Holders(held, own) {
			if prev, ok := out[r]; ok && prev != k {
				conflict[r] = true
			}
			out[r] = k
		}
	}
	for r := range conflict {
		delete(out, r)
	}
	return out, errors.Join(errs...)
}
