// Package metrics counts what the service does, in Prometheus form with the
// prefix haproxy_k8s_sync_. It wraps the reconciler, the Kubernetes source
// and the HAProxy drivers, so none of them knows about metrics, and it
// registers on the registry it is given: no global state.
package metrics

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

const ns = "haproxy_k8s_sync"

// Metrics holds the collectors.
type Metrics struct {
	reconciles      *prometheus.CounterVec
	duration        prometheus.Histogram
	writes          *prometheus.CounterVec
	reloads         prometheus.Counter
	retries         prometheus.Counter
	kubeRequests    *prometheus.CounterVec
	haproxyRequests *prometheus.CounterVec
	ignored         prometheus.Counter
	guarded         *prometheus.CounterVec
	lastSuccess     prometheus.Gauge
	watchEvents     *prometheus.CounterVec
	watchRestarts   *prometheus.CounterVec
	pokes           *prometheus.CounterVec
	pokesCoalesced  prometheus.Counter
	authFailures    *prometheus.CounterVec
	skipped         *prometheus.GaugeVec
	transitions     *prometheus.CounterVec
	servers         *prometheus.GaugeVec
	held            *prometheus.GaugeVec
	slots           *prometheus.GaugeVec
	failures        prometheus.Gauge
	dryRuns         *prometheus.CounterVec
	programming     *prometheus.HistogramVec
	inService       *prometheus.HistogramVec
	unmeasured      *prometheus.CounterVec
	serviceEvents   *prometheus.CounterVec
	podGate         *prometheus.CounterVec
	healthPortTCP   *prometheus.GaugeVec
	missingLines    *prometheus.GaugeVec
	unexpected      *prometheus.CounterVec
	cluster         *prometheus.GaugeVec
	zoneServers     *prometheus.GaugeVec
	mismatched      *prometheus.GaugeVec
	alarms          *prometheus.GaugeVec
	selected        *prometheus.GaugeVec
}

// ProgrammingBuckets resolve 10 ms to 5 min, for both latency histograms.
var ProgrammingBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300}

// New registers the collectors on reg; version and revision (the VCS
// revision the binary was built from) label build_info.
func New(reg prometheus.Registerer, version, revision string) *Metrics {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconciles_total",
			Help: "Reconciles (dry runs apart) by result: applied, unchanged, error."}, []string{"result"}),
		dryRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dry_runs_total",
			Help: "Dry runs (GET /plan, ?dryRun=true) by result: planned, error."}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "reconcile_duration_seconds",
			Help: "Duration of a reconcile (dry runs apart), retries included.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}),
		servers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "servers",
			Help: "Servers of each backend by state (ready, gated: held in drain until their check passes, drain, maint), as the last successful reconcile left them."}, []string{"target", "backend", "state"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "servers_held",
			Help: "Servers held by the last reconcile, by why: waiting (for their check), draining (for their sessions), guarded (mass-deletion guard), capped (MAX_SERVERS)."}, []string{"target", "backend", "why"}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "slots",
			Help: "Slots of haproxy.cfg (server-template) in backends that have some, by use, as the last successful reconcile left them: filled, idle, and overflow (servers that found no free slot, added with add server)."}, []string{"target", "backend", "use"}),
		failures: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "consecutive_failures",
			Help: "Reconciles (dry runs apart) that failed in a row; 0 after a success."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "haproxy_writes_total",
			Help: "Writes to HAProxy by kind: runtime (no reload), config (reloads), transaction."}, []string{"kind"}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "haproxy_reloads_total",
			Help: "Backend syncs that caused an HAProxy reload."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "retries_total",
			Help: "Attempts beyond the first, over all targets and backends."}),
		kubeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "kubernetes_reads_total",
			Help: "Reads of the Service, EndpointSlices and Nodes, by result."}, []string{"result"}),
		haproxyRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "haproxy_calls_total",
			Help: "Reads and applies against HAProxy targets, by target, operation and result."}, []string{"target", "op", "result"}),
		ignored: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "events_ignored_total",
			Help: "Events skipped because they concern another object."}),
		guarded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "deletion_guard_holds_total",
			Help: "Backend syncs where the mass-deletion guard parked servers instead of deleting them, by target and backend."}, []string{"target", "backend"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "last_success_timestamp_seconds",
			Help: "Unix time of the last successful reconcile (not dry run)."}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "watch_events_total",
			Help: "Watch events received, by kind of object, event type and whether it poked a reconcile."}, []string{"kind", "type", "poked"}),
		watchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "watch_restarts_total",
			Help: "Watches restarted (closed connection, error, 410 Gone), by kind of object."}, []string{"kind"}),
		pokes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "pokes_total",
			Help: "Reconciles asked for without a caller waiting, by source: start, watch, resync."}, []string{"source"}),
		pokesCoalesced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "pokes_coalesced_total",
			Help: "Pokes that joined a reconcile already waiting to start, so cost nothing."}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "auth_failures_total",
			Help: "Requests refused by webhook auth, by reason: missing, invalid, forbidden, busy, unavailable."}, []string{"reason"}),
		skipped: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "skipped_endpoints",
			Help: "Endpoints and Nodes the last Kubernetes read left out (invalid or not allowed), by reason."}, []string{"reason"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "server_transitions_total",
			Help: "Server state transitions applied, by the state reached (ready, gated, drain, maint, deleted) and the reason; a server held until its check passes is to=gated, reason awaiting-check."}, []string{"to", "reason"}),
		programming: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "network_programming_duration_seconds",
			Help: "From an EndpointSlice's last-change-trigger-time to the change applied in HAProxy, by target (kube-proxy's SLI).", Buckets: ProgrammingBuckets}, []string{"target"}),
		inService: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "network_in_service_duration_seconds",
			Help: "From an EndpointSlice's last-change-trigger-time to the server it brought in taking traffic after its passed check, by target.", Buckets: ProgrammingBuckets}, []string{"target"}),
		unmeasured: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "network_programming_unmeasured_total",
			Help: "Changes applied but not timed, by target, stage (applied, in-service) and reason: unstamped (no last-change-trigger-time on their slices), stale (older than 15 min: a restore)."}, []string{"target", "stage", "reason"}),
		serviceEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "service_events_total",
			Help: "Events on the Service (SERVICE_EVENTS) by write: create, patch (a repeat counted), dropped (over the bound)."}, []string{"op"}),
		podGate: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "pod_gate_requests_total",
			Help: "Readiness gate (POD_READINESS_GATE) requests: get (a pod read), true and false (the condition written)."}, []string{"op"}),
		healthPortTCP: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "health_port_tcp_checks",
			Help: "Servers checked on kube-proxy's health port with a bare TCP connect (L4OK), which passes a node that cannot serve: the backend lacks option httpchk GET /healthz. As the last successful reconcile read them."}, []string{"target", "backend"}),
		missingLines: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "backend_missing_lines",
			Help: "Recommended backend lines (option redispatch 1, retries 3, in http mode retry-on conn-failure empty-response) the backend runs without, as the last successful reconcile read them; absent where the driver cannot tell (runtime API)."}, []string{"target", "backend"}),
	}
	m.unexpected = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "haproxy_unexpected_reloads_total",
		Help: "Writes the Data Plane API answered with a reload where it applies them at runtime (a server add, a weight, address or maintenance change), by target; the log says why once."}, []string{"target"})
	m.cluster = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "cluster_info",
		Help: "The CLUSTER_NAME whose servers (named with it as a prefix) this instance owns, and HAPROXY_LOCAL_ZONE; always 1, empty labels when unset."}, []string{"cluster", "local_zone"})
	m.zoneServers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "zone_servers",
		Help: "With HAPROXY_LOCAL_ZONE: this instance's desired servers of each backend by zone, role (active: the local zone; backup: the others) and whether Kubernetes says they are ready, as the last successful reconcile saw them."}, []string{"target", "backend", "zone", "role", "ready"})
	m.mismatched = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "target_mismatched",
		Help: "1 while a target's runtime socket and its Data Plane API reach different HAProxy (nothing is written to it), 0 once they were seen to match; by target (the Data Plane URL)."}, []string{"target"})
	m.alarms = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "alarms",
		Help: "1 while a problem that was warned about lasts, 0 once it mended (package alarm), by kind (unreachable, backend-refused, tls-pair, check-not-passed) and subject (the target, its backend, the server or the certificate file)."}, []string{"kind", "subject"})
	m.selected = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "services",
		Help: "Many-Services mode: Services that select themselves, by state: followed, refused (what they ask for is another's or cannot be served), as the last reconcile's selection saw them."}, []string{"state"})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "build_info",
		Help: "Build information: version, VCS revision, Go version; always 1."}, []string{"version", "revision", "goversion"})
	build.WithLabelValues(version, revision, runtime.Version()).Set(1)
	reg.MustRegister(m.reconciles, m.duration, m.writes, m.reloads, m.retries, m.kubeRequests,
		m.haproxyRequests, m.ignored, m.guarded, m.lastSuccess, m.watchEvents, m.watchRestarts,
		m.pokes, m.pokesCoalesced, m.authFailures, m.skipped, m.transitions,
		m.servers, m.held, m.slots, m.failures, m.dryRuns, m.programming, m.inService, m.unmeasured, m.serviceEvents, m.podGate, m.healthPortTCP, m.missingLines, m.unexpected, m.cluster, m.zoneServers, m.mismatched, m.alarms, m.selected, build)
	return m
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// Cluster records CLUSTER_NAME and HAPROXY_LOCAL_ZONE in cluster_info.
func (m *Metrics) Cluster(name, localZone string) {
	m.cluster.Reset()
	m.cluster.WithLabelValues(name, localZone).Set(1)
}

// WatchEvent counts one watch event.
func (m *Metrics) WatchEvent(kind, typ string, poked bool) {
	m.watchEvents.WithLabelValues(kind, typ, strconv.FormatBool(poked)).Inc()
}

// WatchRestart counts one restart of a watch.
func (m *Metrics) WatchRestart(kind string) { m.watchRestarts.WithLabelValues(kind).Inc() }

// Poke counts one poke from source, and whether it was coalesced.
func (m *Metrics) Poke(source string, coalesced bool) {
	m.pokes.WithLabelValues(source).Inc()
	if coalesced {
		m.pokesCoalesced.Inc()
	}
}

// Transition counts one server state transition.
func (m *Metrics) Transition(t reconcile.Transition) {
	m.transitions.WithLabelValues(t.To, t.Reason).Inc()
}

// Programmed times one Kubernetes change HAProxy took, or counts it as
// unmeasured.
func (m *Metrics) Programmed(p reconcile.Programmed) {
	switch {
	case p.Unmeasured != "":
		m.unmeasured.WithLabelValues(p.Target, p.Stage, p.Unmeasured).Inc()
	case p.Stage == reconcile.StageInService:
		m.inService.WithLabelValues(p.Target).Observe(p.Latency.Seconds())
	default:
		m.programming.WithLabelValues(p.Target).Observe(p.Latency.Seconds())
	}
}

// ServiceEvent counts one Event write on the Service, or one dropped.
func (m *Metrics) ServiceEvent(op string) { m.serviceEvents.WithLabelValues(op).Inc() }

// PodGate counts one readiness gate request.
func (m *Metrics) PodGate(op string) { m.podGate.WithLabelValues(op).Inc() }

// AuthFailure counts a request refused by webhook auth.
func (m *Metrics) AuthFailure(reason string) { m.authFailures.WithLabelValues(reason).Inc() }

// Mismatched sets target_mismatched for target (package pair).
func (m *Metrics) Mismatched(target string, mismatched bool) {
	v := 0.0
	if mismatched {
		v = 1
	}
	m.mismatched.WithLabelValues(target).Set(v)
}

// Alarm sets alarms{kind,subject}: 1 while the problem is open, 0 once it
// mended (package alarm's Book.OnChange).
func (m *Metrics) Alarm(kind, subject string, open bool) {
	v := 0.0
	if open {
		v = 1
	}
	m.alarms.WithLabelValues(kind, subject).Set(v)
}

// Ignored counts an event the handler skipped.
func (m *Metrics) Ignored() { m.ignored.Inc() }

// WrapReconciler counts reconciles, their duration, retries and reloads.
func (m *Metrics) WrapReconciler(r reconcile.Runner) reconcile.Runner { return observed{m: m, r: r} }

// WrapService is WrapReconciler for one Service of many (SERVICE_SELECTION
// annotation or class): its reconciles are counted and its backends'
// gauges kept as in the single-Service mode. consecutive_failures and
// last_success_timestamp_seconds are the instance's (Outcome): one
// Service's own failure must not reset or raise them for the others. And
// skipped_endpoints, which has no Service label, is left to the
// single-Service mode: each Service's read would overwrite the last's.
func (m *Metrics) WrapService(r reconcile.Runner) reconcile.Runner {
	return observed{m: m, r: r, service: true}
}

// Outcome records one reconcile of the instance in many-Services mode (all
// Services, or some): a success sets last_success_timestamp_seconds and
// zeroes consecutive_failures; a failure adds one to consecutive_failures.
func (m *Metrics) Outcome(ok bool) {
	if ok {
		m.failures.Set(0)
		m.lastSuccess.SetToCurrentTime()
		return
	}
	m.failures.Inc()
}

// ForgetBackend deletes every series of backend (on every target): a
// backend no Service names any more, whose servers are gone (many-Services
// mode). Without it, servers and servers_held of a deleted Service stayed
// at their last values for the process's life, and a dashboard summed
// them with the living.
func (m *Metrics) ForgetBackend(backend string) {
	l := prometheus.Labels{"backend": backend}
	for _, g := range []*prometheus.GaugeVec{m.servers, m.held, m.slots, m.healthPortTCP, m.missingLines, m.zoneServers} {
		g.DeletePartialMatch(l)
	}
	m.guarded.DeletePartialMatch(l)
}

// Selected records how many Services the last selection followed and
// refused (many-Services mode): a refusal is no failure of the instance,
// so this is where it is counted.
func (m *Metrics) Selected(followed, refused int) {
	m.selected.WithLabelValues("followed").Set(float64(followed))
	m.selected.WithLabelValues("refused").Set(float64(refused))
}

type observed struct {
	m       *Metrics
	r       reconcile.Runner
	service bool // one Service of many: see WrapService
}

func (o observed) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	start := time.Now()
	res, err := o.r.Reconcile(ctx, dryRun)
	if dryRun {
		o.m.dryRuns.WithLabelValues(res.Status).Inc()
		return res, err
	}
	o.m.duration.Observe(time.Since(start).Seconds())
	o.m.reconciles.WithLabelValues(res.Status).Inc()
	_, partial := reconcile.OnlyTargetOf(ctx) // says nothing of the other targets
	switch {
	case partial, o.service:
	case err != nil:
		o.m.failures.Inc()
	default:
		o.m.failures.Set(0)
	}
	for _, t := range res.Targets {
		if t.Error == "" {
			for st, n := range t.Servers {
				o.m.servers.WithLabelValues(t.Target, t.Backend, st).Set(float64(n))
			}
			for why, names := range map[string][]string{"waiting": t.Waiting, "draining": t.Draining, "guarded": t.Guarded, "capped": t.Capped} {
				o.m.held.WithLabelValues(t.Target, t.Backend, why).Set(float64(len(names)))
			}
			if t.Slots != nil {
				o.m.slots.WithLabelValues(t.Target, t.Backend, "filled").Set(float64(t.Slots["filled"]))
				o.m.slots.WithLabelValues(t.Target, t.Backend, "idle").Set(float64(t.Slots["idle"]))
				o.m.slots.WithLabelValues(t.Target, t.Backend, "overflow").Set(float64(len(t.Overflow)))
			}
			o.m.healthPortTCP.WithLabelValues(t.Target, t.Backend).Set(float64(len(t.HealthPortTCP)))
			if t.LinesRead {
				o.m.missingLines.WithLabelValues(t.Target, t.Backend).Set(float64(len(t.MissingBackendLines)))
			}
			o.m.zones(t)
		}
		if t.Attempts > 1 {
			o.m.retries.Add(float64(t.Attempts - 1))
		}
		if t.Reload {
			o.m.reloads.Inc()
		}
		if len(t.Guarded) > 0 {
			o.m.guarded.WithLabelValues(t.Target, t.Backend).Inc()
		}
	}
	if err == nil && !partial && !o.service {
		o.m.lastSuccess.SetToCurrentTime()
	}
	if !o.service && (err == nil || errors.Is(err, reconcile.ErrTargets)) { // Kubernetes was read
		o.m.skipped.Reset()
		for reason, n := range res.SkippedByReason {
			o.m.skipped.WithLabelValues(reason).Set(float64(n))
		}
	}
	return res, err
}

// WrapSource counts Kubernetes reads.
func (m *Metrics) WrapSource(s reconcile.Source) reconcile.Source { return source{m, s} }

type source struct {
	m *Metrics
	s reconcile.Source
}

func (s source) Read(ctx context.Context) (desired.Input, error) {
	in, err := s.s.Read(ctx)
	s.m.kubeRequests.WithLabelValues(result(err)).Inc()
	return in, err
}

// WrapDriver counts calls to one HAProxy target and its writes by kind. The
// wrapper is a reconcile.UpReader exactly when d is one.
func (m *Metrics) WrapDriver(d reconcile.Driver) reconcile.Driver {
	if ur, ok := d.(reconcile.UpReader); ok {
		return upDriver{driver{m, d}, ur}
	}
	return driver{m, d}
}

type driver struct {
	m *Metrics
	d reconcile.Driver
}

func (d driver) Name() string { return d.d.Name() }

// Unwrap is the driver counted (reconcile.BulkOf looks through it).
func (d driver) Unwrap() reconcile.Driver { return d.d }

func (d driver) Policy() plan.Policy { return d.d.Policy() }

// upDriver is a driver whose driver reads UP states separately.
type upDriver struct {
	driver
	ur reconcile.UpReader
}

func (d upDriver) ReadUp(ctx context.Context, backend string) (map[string]bool, error) {
	up, err := d.ur.ReadUp(ctx, backend)
	d.m.haproxyRequests.WithLabelValues(d.d.Name(), "read-up", result(err)).Inc()
	return up, err
}

func (d driver) Read(ctx context.Context, backend string) (model.Backend, error) {
	b, err := d.d.Read(ctx, backend)
	d.m.haproxyRequests.WithLabelValues(d.d.Name(), "read", result(err)).Inc()
	return b, err
}

func (d driver) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	a, err := d.d.Apply(ctx, p)
	d.m.haproxyRequests.WithLabelValues(d.d.Name(), "apply", result(err)).Inc()
	for k, n := range a.ByKind {
		d.m.writes.WithLabelValues(string(k)).Add(float64(n))
	}
	if a.UnexpectedReloads > 0 {
		d.m.unexpected.WithLabelValues(d.d.Name()).Add(float64(a.UnexpectedReloads))
	}
	return a, err
}

// zones sets zone_servers for one backend's result: every zone it names,
// and zero for those of earlier results it no longer does.
func (m *Metrics) zones(t reconcile.TargetResult) {
	m.zoneServers.DeletePartialMatch(prometheus.Labels{"target": t.Target, "backend": t.Backend})
	for zone, c := range t.Zones {
		role := "active"
		if c.Backup {
			role = "backup"
		}
		m.zoneServers.WithLabelValues(t.Target, t.Backend, zone, role, "true").Set(float64(c.Ready))
		m.zoneServers.WithLabelValues(t.Target, t.Backend, zone, role, "false").Set(float64(c.Servers - c.Ready))
	}
}
