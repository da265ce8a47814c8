package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Target is one HAProxy's Data Plane API (*dataplane.Client).
type Target interface {
	Name() string
	ReadProxies(ctx context.Context) (dataplane.Proxies, error)
	WriteProxies(ctx context.Context, version int64, w dataplane.ProxyWrite) (int64, error)
	Sessions(ctx context.Context, backend string) (sessions int, known bool, err error)
}

// Manager keeps class Services' frontends and backends on every target.
// It holds no state between passes: each Sync reads HAProxy back.
type Manager struct {
	Targets []Target
	// VIPs are the addresses frontends bind, one per target in target
	// order, or one for all.
	VIPs []string
	// Class (LOAD_BALANCER_CLASS) and Cluster (CLUSTER_NAME) are what its
	// marks carry (Owner); Namespaces are WATCH_NAMESPACES.
	Class, Cluster string
	Namespaces     []string
	Log            *slog.Logger
	// Straggle is how long the other targets are waited for once one
	// answered (eachTarget); 0: DefaultStraggle.
	Straggle time.Duration
	busy     busyTargets
}

func (m *Manager) straggle() time.Duration {
	if m.Straggle > 0 {
		return m.Straggle
	}
	return DefaultStraggle
}

// attempts bounds the re-reads of one target after lost races.
const attempts = 3

// targetResult is what one target's pass did.
type targetResult struct {
	created, removed, draining []string
	ready                      map[string]bool
	loading                    []string
	failed                     map[string]string
	failedClass                map[string]failure.Class
	err                        error // the target could not be read or written at all
}

// Sync makes every class Service in want have its frontends and backends on
// every target, and removes owned ones no Service wants once drained. Each
// Service is written in its own transaction: one Service's failure does not
// hold back another's. The error is for targets that could not be read; the
// report says, per Service, what is ready and what failed. classes are the
// spec.loadBalancerClass of the listed LoadBalancer Services that have one
// (Owner.Classes): what tells whose a section marked before marks carried
// the class is.
func (m *Manager) Sync(ctx context.Context, want []services.Selected, classes map[string]string) (services.FrontendReport, error) {
	own := Owner{Class: m.Class, Cluster: m.Cluster, Classes: classes, Namespaces: m.Namespaces}
	rep := services.FrontendReport{Ready: map[string]bool{}, Failed: map[string]string{}, FailedClass: map[string]failure.Class{}}
	if len(m.VIPs) != 1 && len(m.VIPs) != len(m.Targets) {
		return rep, &failure.InputError{Err: fmt.Errorf("HAPROXY_VIP has %d addresses for %d targets: give one, or one per target", len(m.VIPs), len(m.Targets))}
	}
	results, left := eachTarget(ctx, &m.busy, len(m.Targets), m.straggle(), func(ctx context.Context, i int) (targetResult, bool) {
		vip := m.VIPs[0]
		if len(m.VIPs) > 1 {
			vip = m.VIPs[i]
		}
		r := m.syncTarget(ctx, m.Targets[i], vip, want, own)
		return r, r.err == nil
	})
	for i, err := range left {
		if err == nil {
			continue
		}
		// Not read this pass: nothing it says of a Service.
		results[i] = targetResult{ready: map[string]bool{}, err: err}
		rep.Behind = append(rep.Behind, m.Targets[i].Name())
		level := slog.LevelWarn
		if s, ok := err.(*StragglingError); ok && s.Busy {
			level = slog.LevelDebug // said when it was left behind
		}
		m.log().Log(ctx, level, "target left behind", "target", m.Targets[i].Name(), "error", err)
	}

	var errs []error
	for _, s := range want {
		if s.Class {
			rep.Ready[s.Key()] = len(m.Targets) > 0
		}
	}
	for i, r := range results {
		name := m.Targets[i].Name()
		if r.err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", name, r.err))
		}
		for k := range rep.Ready {
			if !r.ready[k] {
				rep.Ready[k] = false
			}
		}
		for k, why := range r.failed {
			if len(m.Targets) > 1 {
				why = name + ": " + why
			}
			if prev, ok := rep.Failed[k]; ok {
				why = prev + "; " + why
			}
			rep.Failed[k] = why
			// A failure a retry may mend on any target is the Service's
			// mendable failure: the least hopeful class would hide it.
			c := r.failedClass[k]
			if c == "" {
				c = failure.Permanent
			}
			if prev, ok := rep.FailedClass[k]; !ok || prev == failure.Permanent {
				rep.FailedClass[k] = c
			}
		}
		rep.Created = union(rep.Created, r.created)
		rep.Removed = union(rep.Removed, r.removed)
		rep.Draining = union(rep.Draining, r.draining)
		rep.Loading = union(rep.Loading, r.loading)
	}
	if len(rep.Failed) == 0 {
		rep.Failed, rep.FailedClass = nil, nil
	}
	return rep, errors.Join(errs...)
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	slices.Sort(a)
	return a
}

func (m *Manager) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.Default()
}

// syncTarget reads, plans and writes one target; a lost race (or any
// temporary failure) re-reads and re-plans, attempts times at most.
func (m *Manager) syncTarget(ctx context.Context, t Target, vip string, want []services.Selected, own Owner) targetResult {
	log := m.log().With("target", t.Name())
	out := targetResult{ready: map[string]bool{}, failed: map[string]string{}, failedClass: map[string]failure.Class{}}
	for attempt := 1; ; attempt++ {
		held, err := t.ReadProxies(ctx)
		if err != nil {
			if failure.Of(err) == failure.Temporary && attempt < attempts && pause(ctx, attempt) {
				continue
			}
			// Not a failure of any Service's frontends (they may well be
			// there): the error says it, and the Services are not ready.
			out.err = err
			return out
		}
		drained, err := m.drained(ctx, t, want, held, own)
		if err != nil {
			log.Warn("could not tell whether unwanted backends drained; they wait", "error", err)
		}
		p := Compute(want, held, own, vip, drained)
		out.draining = p.Draining
		out.failed = p.Failed
		out.failedClass = map[string]failure.Class{}
		for k := range p.Failed {
			out.failedClass[k] = failure.Permanent // what the Service asks cannot be made as asked
		}
		out.ready = p.Ready
		version, again := held.Version, false
		written, removed := map[string]bool{}, false
		for _, w := range p.Writes {
			next, err := t.WriteProxies(ctx, version, w.ProxyWrite)
			if err != nil {
				if failure.Of(err) == failure.Temporary && attempt < attempts && pause(ctx, attempt) {
					log.Info("frontend write lost a race or failed for a moment; reading again", "error", err)
					again = true
					break
				}
				if w.Service != "" {
					out.failed[w.Service] = err.Error()
					out.failedClass[w.Service] = failure.Of(err)
				}
				// A drained backend whose removal failed is still there:
				// listed draining, so that whoever follows it up (a left
				// backend's follow-up) comes back to remove it.
				out.draining = append(out.draining, w.DeleteBackends...)
				log.Warn("frontend write failed", "service", w.Service, "remove", names(w.DeleteFrontends, w.DeleteBackends), "error", err)
				continue
			}
			version = next
			if w.Service != "" {
				out.ready[w.Service] = true
				written[w.Service] = true
			}
			for _, p := range w.CreateFrontends {
				out.created = append(out.created, p.Frontend)
				log.Info("frontend created", "service", w.Service, "frontend", p.Frontend, "bind", fmt.Sprintf("%s:%d", p.Address, p.Port), "backend", p.Backend)
			}
			for _, p := range w.UpdateFrontends {
				log.Info("frontend rebound", "service", w.Service, "frontend", p.Frontend, "bind", fmt.Sprintf("%s:%d", p.Address, p.Port))
			}
			if rm := names(w.DeleteFrontends, w.DeleteBackends); len(rm) > 0 {
				out.removed = append(out.removed, rm...)
				removed = true
				log.Info("drained frontend and backend removed", "sections", strings.Join(rm, ","))
			}
		}
		if !again && removed && len(out.failed) > 0 && attempt < attempts {
			// What was removed may have freed what a refused Service
			// asks (the address:port of a left Service's frontend): a
			// second plan gives it now, not at that Service's retry (2 s
			// in history seed 682573831, its clients refused meanwhile).
			again = true
			continue
		}
		if !again {
			out.loading = m.loading(ctx, t, want, out.ready, written)
			return out
		}
	}
}

// loading returns the ready Services whose backends HAProxy does not run
// yet: those written this pass (their reload is asynchronous), and those
// whose backend the target's socket does not know (a reload is pending). A
// target without a socket cannot tell: its servers go through the API,
// which knows the configuration.
func (m *Manager) loading(ctx context.Context, t Target, want []services.Selected, ready, written map[string]bool) []string {
	var out []string
	for _, s := range want {
		key := s.Key()
		if !s.Class || !ready[key] {
			continue
		}
		if written[key] {
			out = append(out, key)
			continue
		}
		for _, p := range s.Ports {
			_, be := services.ClassNames(m.Cluster, s.Namespace, s.Name, p.Port)
			if _, _, err := t.Sessions(ctx, be); err != nil {
				m.log().Debug("backend not run by HAProxy yet: its servers wait for the reload", "target", t.Name(), "backend", be, "error", err)
				out = append(out, key)
				break
			}
		}
	}
	return out
}

// pause waits a little before another attempt (100 ms, then 200 ms), and
// reports false when ctx ends first.
func pause(ctx context.Context, attempt int) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		return true
	}
}

// names are the frontends removed, or the backend where no frontend went
// with it.
func names(fes, bes []string) []string {
	if len(fes) > 0 {
		return fes
	}
	return bes
}

// drained tells, for each owned backend no Service wants, whether it may go
// (Drained); the sessions are asked only of those whose servers all sit in
// maintenance.
func (m *Manager) drained(ctx context.Context, t Target, want []services.Selected, held dataplane.Proxies, own Owner) (map[string]bool, error) {
	out := map[string]bool{}
	var errs []error
	for _, b := range Unwanted(want, held, own) {
		sessions, known := 0, false
		if len(b.Servers) > 0 && !slices.ContainsFunc(b.Servers, func(s dataplane.ProxyServer) bool { return !s.Maint }) {
			var err error
			if sessions, known, err = t.Sessions(ctx, b.Name); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		out[b.Name] = Drained(b, sessions, known)
	}
	return out, errors.Join(errs...)
}

// SyncTarget is Sync on the target named alone, nil error and an empty
// report if there is none: a left class Service's drained sections are
// removed there as soon as its servers there are deleted, while another
// target of the pair may still hang (history seed 682573831, class,
// HAProxy 2.6: the next claimant of the port was refused 16 s on the
// HAProxy that was up). The target's passes left behind by Sync are
// unknown to it: the caller asks only a target that just answered.
func (m *Manager) SyncTarget(ctx context.Context, name string, want []services.Selected, classes map[string]string) (services.FrontendReport, error) {
	for i, t := range m.Targets {
		if t.Name() != name {
			continue
		}
		one := &Manager{Targets: []Target{t}, VIPs: m.VIPs, Class: m.Class, Cluster: m.Cluster, Namespaces: m.Namespaces, Log: m.Log, Straggle: m.Straggle}
		if len(m.VIPs) > 1 && len(m.VIPs) == len(m.Targets) {
			one.VIPs = m.VIPs[i : i+1]
		}
		return one.Sync(ctx, want, classes)
	}
	return services.FrontendReport{}, nil
}
