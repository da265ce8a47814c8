// Package fleet is the many-Services reconcile (SERVICE_SELECTION annotation
// and/or class): it lists the Services, selects them (services.Select),
// has class Services' frontends made (Frontends), reconciles each selected
// Service's backends with its own reconcile.Reconciler, a few at a time,
// and writes class Services' status. One Service's failure never holds
// back another's; every guarantee of the single-Service mode holds per
// backend, since each backend is reconciled exactly as there.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// Frontends makes class Services' frontends and backends (package lb's
// Manager): Sync is given every class Service selected (and the class of
// every Service listed), and reports which
// are ready, which failed, and which owned backends no Service wants.
type Frontends interface {
	// classes are services.ClassesOf every listed Service.
	Sync(ctx context.Context, want []services.Selected, classes map[string]string) (services.FrontendReport, error)
}

// InputReader reads every followed Service's objects at once (a
// kube.Bulk), for a full reconcile's snapshots.
type InputReader interface {
	Inputs(ctx context.Context, svcs []corev1.Service) (map[string]desired.Input, error)
}

// HolderReader reads back which Service each resource is served to (a
// *lb.Manager: the frontends' marks and binds). Frontends that are one are
// asked once, by the first selection of the process.
type HolderReader interface {
	Holders(ctx context.Context) (map[string]string, error)
}

// StatusWriter writes a Service's status (services/status); a *kube.Client
// is one.
type StatusWriter interface {
	UpdateServiceStatus(ctx context.Context, svc *corev1.Service) (*corev1.Service, error)
}

// Metrics is what the fleet tells package metrics (a *metrics.Metrics).
type Metrics interface {
	WrapService(r reconcile.Runner) reconcile.Runner
	Outcome(ok bool)
	Selected(followed, refused int)
	ForgetBackend(backend string)
}

// Concurrency is how many Services are reconciled at once. The per-target
// locks let one reconcile write each HAProxy at a time; the others read
// Kubernetes and HAProxy meanwhile.
const Concurrency = 4

// Fleet reconciles every selected Service. Set the fields before the first
// call; it keeps nothing between calls but the Reconcilers it built (their
// logs say a repeated warning once) and the refusals last logged.
type Fleet struct {
	Services  kube.ServiceLister
	Selection services.Selection
	// Template gives every Service's Reconciler its Targets, Options (but
	// Backends), Timeout, policies, callbacks, Log and Cluster.
	Template *reconcile.Reconciler
	// Source reads one Service's objects (a *kube.Source).
	Source func(namespace, name string) reconcile.Source
	// Gate, when set, is the readiness gate of a namespace's pods.
	Gate func(namespace string) reconcile.PodGate
	// Wrap, when set, wraps each Service's Reconciler (Events, metrics).
	Wrap func(s services.Selected, r reconcile.Runner) reconcile.Runner
	// Frontends is nil when class selection is off.
	Frontends Frontends
	// Status, when set, writes class Services' status: VIPs as ingress
	// addresses, or Hostname.
	Status   StatusWriter
	VIPs     []string
	Hostname string
	// ProxyProtocol says class Services' servers get the PROXY protocol
	// (HAPROXY_SEND_PROXY_V2): their status says ipMode Proxy (ours).
	ProxyProtocol bool
	// Metrics, when set, counts each Service's reconciles and keeps its
	// backends' gauges (WrapService), and is told whether each reconcile
	// (full or of some Services) succeeded for the instance (Outcome).
	Metrics Metrics
	// Warn, when set, is told of each refusal and each class Service's
	// frontend failure once while it lasts (not on every reconcile): a
	// Warning Event on svc.
	Warn func(svc *corev1.Service, reason, message string)
	Log  *slog.Logger
	// Inputs, when set, makes a full reconcile read each kind once: every
	// target that can (reconcile.BulkOf) reads all its backends at once,
	// then Kubernetes is listed once, and each Service plans from that
	// snapshot; only a Service with something to write reads afresh
	// (reconcile.Snapshot).
	Inputs InputReader

	locks   reconcile.Locks
	mu      sync.Mutex
	runners map[string]built
	notices map[string]map[string][]notice // kind → key → warnings last told
	// held is what the last selection gave (services.Holdings): the
	// holder keeps what it serves against a later claimant. Annotated
	// backends' servers carry no mark of their Service, so HAProxy cannot
	// say it; this process's previous selection can.
	held map[string]string
	// leftSeen holds the backends an earlier read of the Services found
	// left: a left backend's parked servers are deleted only on a second
	// read (plan.Policy.LeftBefore). A new process (or replica) starts
	// with none, so it waits for one read more, never one less.
	leftSeen map[string]bool
	// ipModeDropped: the API server dropped the ipMode of a status
	// written (noteIPMode).
	ipModeDropped bool
	// servedBy is what each class Service's reconciles last found in
	// service, per target (served): its status waits for every target.
	servedBy map[string]served
	// reading holds the targets whose bulk read (readAll) is still in
	// flight, left behind by an earlier full reconcile.
	reading map[string]bool
}

type built struct {
	backends string
	runner   reconcile.Runner
}

// Result is the answer to a many-Services reconcile, as the HTTP API
// returns it.
type Result struct {
	Status   string             `json:"status"`
	Services []ServiceResult    `json:"services"`
	Refused  []services.Refused `json:"refused"`
	// Left are backends no selected Service names any more (handed over by
	// the watch, or draining class backends), reconciled as zero endpoints.
	Left       []LeftResult             `json:"left,omitempty"`
	Frontends  *services.FrontendReport `json:"frontends,omitempty"`
	DurationMs float64                  `json:"durationMs"`
	Error      string                   `json:"error,omitempty"`
	ErrorClass failure.Class            `json:"errorClass,omitempty"`
}

// ServiceResult is one Service's reconcile: the single-Service result with
// the Service's key, and what was done to its status.
type ServiceResult struct {
	Service string `json:"service"`
	reconcile.Result
	// Ingress is "written" or "withdrawn" when this reconcile changed the
	// Service's status.loadBalancer; IngressError why it could not.
	Ingress      string `json:"ingress,omitempty"`
	IngressError string `json:"ingressError,omitempty"`
	// Loading says why a class Service's servers were not reconciled this
	// time: HAProxy does not run its new frontends and backends yet (a
	// reload is pending). The next reconcile does it.
	Loading string `json:"loading,omitempty"`
}

// Pending says whether a follow-up reconcile has work: servers waiting (as
// for one Service), or a class Service waiting for HAProxy's reload.
func (s ServiceResult) Pending() bool { return s.Loading != "" || s.Result.Pending() }

// LeftResult is one left backend's reconcile as zero endpoints.
type LeftResult struct {
	Backend string `json:"backend"`
	reconcile.Result
}

// ErrServices means at least one Service (or left backend) failed for a
// reason a retry can mend (Mendable); the Result says which. Services
// failing for their own reasons alone are listed in a Result without it.
var ErrServices = errors.New("services failed")

// Mendable decides whether a Service's failure of class c fails the
// instance's reconcile (503, so that the CronJob and Knative try again):
// only what a retry can mend does, a target unreachable or an answer that
// did not come. A Permanent failure is the Service's own (a backend not in
// haproxy.cfg or not manageable, an operator's frontend on its port): no
// retry mends it and failing every caller for it would stop everyone's
// retries; the result lists it, its Event and metrics say it. A failure of
// no known class is taken as mendable: better a needless retry than a
// failure hidden.
func Mendable(c failure.Class) bool { return c != failure.Permanent }

// NotSelectedError is ReconcileService's answer for a Service this instance
// does not follow; Reason says why when it was refused.
type NotSelectedError struct{ Key, Reason string }

func (e *NotSelectedError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("service %s is not followed: %s", e.Key, e.Reason)
	}
	return fmt.Sprintf("service %s is not followed (no selection matches it)", e.Key)
}

// Reconcile reconciles every selected Service.
func (f *Fleet) Reconcile(ctx context.Context, dryRun bool) (Result, error) {
	return f.run(ctx, "", nil, dryRun, nil)
}

// ReconcileService reconciles the Service key ("namespace/name") alone; a
// Service not selected is a *NotSelectedError. Selection needs every
// Service (a backend two name goes to its holder), so all are listed; only
// this one's backends are read and written.
func (f *Fleet) ReconcileService(ctx context.Context, key string, dryRun bool) (Result, error) {
	return f.run(ctx, key, nil, dryRun, nil)
}

// ReconcileLeft reconciles backends as zero endpoints (parked, guarded,
// never deleted on one read): those the watch saw a Service stop naming.
// A backend a selected Service names is its Service's: that Service is
// reconciled instead (a claim on it that ended hands it over, though its
// holder still names it).
func (f *Fleet) ReconcileLeft(ctx context.Context, backends []string) (Result, error) {
	if len(backends) == 0 {
		return Result{Status: reconcile.StatusUnchanged, Services: []ServiceResult{}, Refused: []services.Refused{}}, nil
	}
	return f.run(ctx, "", backends, false, nil)
}

// job is one Reconciler run: a Service's, or a left backend's.
type job struct {
	svc     *services.Selected
	backend string // a left backend
	runner  reconcile.Runner
}

// run is every reconcile of the Fleet: a full one (only and left empty),
// one Service's (only), or left backends' (left). part, when set, is told
// each Service's part of the result as soon as its reconcile ended (Lanes
// answers with it the lane reconciles it covers).
func (f *Fleet) run(ctx context.Context, only string, left []string, dryRun bool, part func(ServiceResult, []services.Refused, time.Duration)) (Result, error) {
	start := time.Now()
	// One pass for every Service's reconcile: a target's pair check
	// (pair.Guard.Verify) runs once per reconcile of the instance, not
	// once per Service.
	ctx = reconcile.WithPass(ctx)
	leftOnly, full := left != nil, only == "" && left == nil
	res := Result{Services: []ServiceResult{}, Refused: []services.Refused{}}
	finish := func(err error) (Result, error) {
		res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
		if counted, ok := outcome(err); counted && f.Metrics != nil && !dryRun {
			f.Metrics.Outcome(ok)
		}
		if err != nil {
			res.Status, res.Error = reconcile.StatusError, err.Error()
			if res.ErrorClass == "" {
				res.ErrorClass = failure.Of(err)
			}
		}
		return res, err
	}
	all, err := kube.ReadServices(ctx, f.Services, f.Selection.Namespaces)
	if err != nil {
		return finish(err) // never an empty selection
	}
	held := f.holdings(ctx)
	chosen, refused := services.Select(all, f.Selection, held)
	if f.Metrics != nil && !dryRun {
		f.Metrics.Selected(len(chosen), refusedServices(chosen, refused))
	}
	if !dryRun {
		// Every Service was listed: the holdings are whole. A dry run
		// applies nothing, so it holds nothing.
		f.mu.Lock()
		f.held = services.Holdings(chosen)
		f.mu.Unlock()
	}
	res.Refused = append(res.Refused, refused...)
	// Every Service was listed and selected: the refusals are all there.
	f.tell(ReasonRefused, refusalNotices(refused), all, true)
	if only != "" {
		i := slices.IndexFunc(chosen, func(s services.Selected) bool { return s.Key() == only })
		if i < 0 {
			nse := &NotSelectedError{Key: only}
			for _, r := range refused {
				if r.Service == only {
					nse.Reason = r.Reason
				}
			}
			res.ErrorClass = failure.Permanent
			if f.Status != nil && !dryRun {
				// Left the class or refused: this instance's status goes
				// now, whatever the trigger, not at the next full
				// reconcile (external-dns would publish the VIP meanwhile).
				f.writeStatus(ctx, all, chosen, services.FrontendReport{}, nil, &res, only)
			}
			return finish(nse)
		}
	}
	var jobs []job
	failedFE, loading := map[string]string{}, map[string]bool{}
	var unread error // a target whose frontends could not be read
	var report services.FrontendReport
	class := classOf(chosen)
	// Left class backends are made to drain by the Frontends' pass too: it
	// says which are still owned and draining, and removes the drained
	// ones' sections, so the follow-up, not the next full reconcile,
	// finishes a class Service that left.
	classLeft := leftOnly && f.Frontends != nil && !dryRun && slices.ContainsFunc(left, isClassBackend)
	if f.Frontends != nil && !dryRun && (full || only != "" && isClass(chosen, only) || classLeft) {
		report, err = f.Frontends.Sync(ctx, class, services.ClassesOf(all))
		res.Frontends = &report
		for _, k := range report.Loading {
			loading[k] = true
		}
		for _, s := range class {
			if why, ok := report.Failed[s.Key()]; ok {
				failedFE[s.Key()] = "frontends: " + why
			}
		}
		// A target whose frontends could not be read (one HAProxy of a
		// pair down) holds back nothing on the others: the class Services
		// are reconciled on every target (each target's failure is its
		// own), and fail this reconcile (unsure) without their status
		// withdrawn, nor an Event told: their frontends may well be there.
		unread = err
		// What this pass left behind is not waited for again by its
		// reconciles and bulk reads: a hung HAProxy costs the pass one
		// straggle, not one per stage.
		ctx = reconcile.WithBehind(ctx, report.Behind)
		if err == nil && full {
			left = append(left, report.Draining...)
		}
		// Sync was given every class Service: its failures are all there.
		f.tell(ReasonFrontendFailed, frontendNotices(failedFE), all, true)
	}
	named := map[string]*services.Selected{}
	for i := range chosen {
		for _, p := range chosen[i].Ports {
			named[p.Backend] = &chosen[i]
		}
	}
	if !leftOnly {
		for i := range chosen {
			s := &chosen[i]
			if only != "" && s.Key() != only {
				continue
			}
			if why, failed := failedFE[s.Key()]; failed {
				r := reconcile.Result{Status: reconcile.StatusError, Error: why, ErrorClass: frontendClass(report, s.Key()), Targets: []reconcile.TargetResult{}, Skipped: []desired.Skipped{}}
				if unread != nil {
					// A target not read hides behind no Service's own
					// failure: the caller retries (503).
					r = unsure(r, unread)
				}
				res.Services = append(res.Services, ServiceResult{Service: s.Key(), Result: r})
				continue
			}
			if loading[s.Key()] {
				res.Services = append(res.Services, ServiceResult{Service: s.Key(), Loading: "HAProxy does not run its frontends yet (a reload is pending): its servers are added by the next reconcile",
					Result: reconcile.Result{Status: reconcile.StatusUnchanged, Targets: []reconcile.TargetResult{}, Skipped: []desired.Skipped{}}})
				continue
			}
			jobs = append(jobs, job{svc: s, runner: f.runner(*s)})
		}
	}
	queued := map[string]bool{}
	for _, j := range jobs {
		queued[j.svc.Key()] = true
	}
	for _, b := range dedupe(left) {
		s := named[b]
		switch {
		case s == nil && classLeft && unread == nil && isClassBackend(b) && !slices.Contains(report.Draining, b):
			// Not an owned backend that drains (any more): its sections
			// were removed, by this pass or before, or are not this
			// instance's. Nothing to reconcile.
		case s == nil:
			jobs = append(jobs, job{backend: b, runner: f.zero(b, f.seenLeft(b, dryRun))})
		case leftOnly && !queued[s.Key()] && failedFE[s.Key()] == "":
			// A Service still names it (a refused claim on it ended, or
			// another Service took it over): its own reconcile brings
			// the backend up to date, which nothing else would ask for.
			queued[s.Key()] = true
			jobs = append(jobs, job{svc: s, runner: f.runner(*s)})
		}
	}
	f.prune(chosen, full)
	f.forgetLeft(named)
	var snaps map[string]*reconcile.Snapshot
	if full && !dryRun {
		snaps = f.snapshots(ctx, all, jobs)
	}
	var ahead *early
	if ts, ok := f.Frontends.(TargetSyncer); ok && classLeft {
		ahead = newEarly(jobs, func(target string) services.FrontendReport {
			rep, _ := ts.SyncTarget(ctx, target, class, services.ClassesOf(all)) // a failure: the passes after this reconcile's try again
			return rep
		})
	}
	if part != nil {
		for i := range jobs {
			if s := jobs[i].svc; s != nil && !s.Class { // a class Service's status comes after: not covered
				jobs[i].runner = reported{jobs[i].runner, func(r reconcile.Result, took time.Duration) {
					part(ServiceResult{Service: s.Key(), Result: r}, res.Refused, took)
				}}
			}
		}
	}
	out := f.runAll(ctx, jobs, snaps, dryRun, ahead)
	ahead.Wait()
	if removed := ahead.Removed(); len(removed) > 0 {
		report.Removed = dedupe(append(report.Removed, removed...))
	}
	for i, j := range jobs {
		if j.svc != nil {
			r := out[i]
			if unread != nil && j.svc.Class {
				r = unsure(r, unread)
			}
			res.Services = append(res.Services, ServiceResult{Service: j.svc.Key(), Result: r})
		} else {
			r := out[i]
			r.Warnings = nil // "no EndpointSlice" is what a left backend is, no misconfiguration
			if !dryRun && finished(r) {
				f.mu.Lock()
				delete(f.leftSeen, j.backend)
				f.mu.Unlock()
				if f.Metrics != nil {
					f.Metrics.ForgetBackend(j.backend) // no Service's, and no server left
				}
			}
			res.Left = append(res.Left, LeftResult{Backend: j.backend, Result: r})
		}
	}
	if classLeft && unread == nil && deletedAll(jobs, out) {
		// Their servers were deleted (sessions unknown: no socket), so
		// the sections drained: removed now rather than at the next full
		// reconcile, which nothing may ask for.
		again, err := f.Frontends.Sync(ctx, class, services.ClassesOf(all))
		report.Removed = append(report.Removed, again.Removed...)
		for i := range res.Left {
			// Its sections could not be removed: failed, so that the
			// follow-up comes back for them rather than leave them to a
			// full reconcile nothing may ask for.
			if b := res.Left[i].Backend; isClassBackend(b) && (err != nil || slices.Contains(again.Draining, b)) {
				why := "its frontend and backend are not removed yet"
				if err != nil {
					why += ": " + err.Error()
				}
				res.Left[i].Status, res.Left[i].Error, res.Left[i].ErrorClass = reconcile.StatusError, why, failure.Temporary
			}
		}
	}
	slices.SortFunc(res.Services, func(a, b ServiceResult) int { return strings.Compare(a.Service, b.Service) })
	switch {
	case f.Status == nil || dryRun:
	case !leftOnly:
		f.writeStatus(ctx, all, chosen, report, failedFE, &res, only)
	case classLeft:
		// A Service reconciled for a left backend it names again (a claim
		// that ended, a Service created again): its servers may have
		// entered service here, and nothing may ask for its own reconcile
		// later (class history seed 971962119: its status 22 s late).
		for _, j := range jobs {
			if j.svc != nil && j.svc.Class {
				f.writeStatus(ctx, all, chosen, report, failedFE, &res, j.svc.Key())
			}
		}
	}
	return finish(summarize(&res, dryRun, only == "" && !leftOnly))
}

// holdings is what the previous selection gave, or, before this process
// selected anything, what HAProxy's frontends say (HolderReader): a
// restart or a new replica must not hand a served port to an older
// claimant because its memory is empty. Ports the read-back cannot say
// (a target down, targets that disagree) go by the status, then by age.
func (f *Fleet) holdings(ctx context.Context) map[string]string {
	f.mu.Lock()
	held := f.held
	f.mu.Unlock()
	hr, ok := f.Frontends.(HolderReader)
	if held != nil || !ok {
		return held
	}
	read, err := hr.Holders(ctx)
	if err != nil && f.Log != nil {
		f.Log.Warn("which Service serves each port could not be read back from every target; the status and age decide the rest", "error", err)
	}
	return read
}

// refusedServices counts the Services refused whole: not those of chosen
// (a class Service's UDP port is refused alone).
func refusedServices(chosen []services.Selected, refused []services.Refused) int {
	in := map[string]bool{}
	for _, s := range chosen {
		in[s.Key()] = true
	}
	out := map[string]bool{}
	for _, r := range refused {
		if !in[r.Service] {
			out[r.Service] = true
		}
	}
	return len(out)
}

// unsure is a class Service's result r when some target's frontends could
// not be read (unread): reconciled where they could, but not known done
// there, so it fails with the read's class (retried by its lane, 503 when a
// retry can mend it), and inService keeps its status from being written
// until every target is read again.
func unsure(r reconcile.Result, unread error) reconcile.Result {
	why := "frontends: " + unread.Error()
	if r.Error != "" {
		why += "; " + r.Error
	}
	r.Status, r.Error, r.ErrorClass = reconcile.StatusError, why, failure.Of(unread)
	return r
}

// outcome says whether a reconcile that ended with err counts for the
// instance's metrics (counted), and if so whether it succeeded (ok). Only
// what fails the caller fails the instance (summarize); a Service not
// selected, or a reconcile cut short by the shutdown, says nothing of it.
func outcome(err error) (counted, ok bool) {
	var nse *NotSelectedError
	switch {
	case err == nil:
		return true, true
	case errors.As(err, &nse), errors.Is(err, context.Canceled):
		return false, false
	default:
		return true, false
	}
}

// frontendClass is the class of key's frontend failure in rep (Permanent
// when it says none).
func frontendClass(rep services.FrontendReport, key string) failure.Class {
	if c := rep.FailedClass[key]; c != "" {
		return c
	}
	return failure.Permanent
}

// summarize sets res.Status and returns ErrServices when something failed
// that a retry can mend (Mendable); the Services failing for their own
// reasons stay listed with their error.
func summarize(res *Result, dryRun, full bool) error {
	res.Status = reconcile.StatusUnchanged
	if dryRun {
		res.Status = reconcile.StatusPlanned
	}
	failed, permanent, total := 0, 0, len(res.Services)+len(res.Left)
	rank := map[failure.Class]int{failure.Temporary: 1, failure.Unreachable: 2}
	note := func(r reconcile.Result) {
		switch {
		case r.Status == reconcile.StatusError && !Mendable(r.ErrorClass):
			permanent++
		case r.Status == reconcile.StatusError && Mendable(r.ErrorClass):
			failed++
			c := r.ErrorClass
			if c == "" {
				c = failure.Temporary
			}
			if rank[c] > rank[res.ErrorClass] {
				res.ErrorClass = c
			}
		case r.Status == reconcile.StatusApplied:
			res.Status = reconcile.StatusApplied
		}
	}
	for _, s := range res.Services {
		note(s.Result)
	}
	for _, l := range res.Left {
		note(l.Result)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d", ErrServices, failed, total)
	}
	// Every one of several failing for good is no Service's own reason
	// but the instance's (a certificate a target refuses, a socket it may
	// not open): 503, class permanent, as the single-Service mode answers.
	// One alone (a lane's Service, a left backend), or a batch of a few
	// (a CloudEvent's), may fail for their own: only a full reconcile
	// (full) speaks for the instance.
	if full && total > 1 && permanent == total {
		res.ErrorClass = failure.Permanent
		return fmt.Errorf("%w: %d of %d, none for a reason of its own", ErrServices, permanent, total)
	}
	res.ErrorClass = ""
	return nil
}

// runAll runs jobs, Concurrency at a time; out[i] is jobs[i]'s result.
func (f *Fleet) runAll(ctx context.Context, jobs []job, snaps map[string]*reconcile.Snapshot, dryRun bool, ahead *early) []reconcile.Result {
	out := make([]reconcile.Result, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(Concurrency, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				// A failure is in its result; one Service's never stops
				// another's.
				jctx := ctx
				if s := jobs[i].svc; s != nil && snaps[s.Key()] != nil {
					jctx = reconcile.WithSnapshot(ctx, snaps[s.Key()])
				}
				jctx = ahead.context(jctx, jobs[i])
				out[i], _ = jobs[i].runner.Reconcile(jctx, dryRun)
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// runner returns s's Reconciler (wrapped), built again when its backends
// changed.
func (f *Fleet) runner(s services.Selected) reconcile.Runner {
	opts := f.Template.Options
	opts.Backends = nil
	for _, p := range s.Ports {
		// By number: a Service port's number is unique, its name may be "".
		opts.Backends = append(opts.Backends, desired.PortBackend{Port: strconv.Itoa(int(p.Port)), Backend: p.Backend})
	}
	sig := fmt.Sprint(opts.Backends)
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.runners[s.Key()]; ok && b.backends == sig {
		return b.runner
	}
	r := f.reconciler(f.Source(s.Namespace, s.Name), opts, "service", s.Key())
	if f.Gate != nil && opts.ReadinessGate {
		r.Gate = f.Gate(s.Namespace)
	}
	var run reconcile.Runner = r
	if f.Metrics != nil {
		run = f.Metrics.WrapService(run)
	}
	if f.Wrap != nil {
		run = f.Wrap(s, run)
	}
	if f.runners == nil {
		f.runners = map[string]built{}
	}
	f.runners[s.Key()] = built{backends: sig, runner: run}
	return run
}

// reconciler is a Reconciler like the template's, for source and opts,
// sharing the per-target locks of every other.
func (f *Fleet) reconciler(src reconcile.Source, opts desired.Options, logKey, logValue string) *reconcile.Reconciler {
	t := f.Template
	log := t.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &reconcile.Reconciler{
		Source: src, Options: opts, Targets: t.Targets, Timeout: t.Timeout, Backoff: t.Backoff,
		GuardPercent: t.GuardPercent, MaxServers: t.MaxServers, DrainTimeout: t.DrainTimeout,
		OnTransition: t.OnTransition, OnProgrammed: t.OnProgrammed, Cluster: t.Cluster,
		Log: log.With(logKey, logValue), Locks: &f.locks,
	}
}

// prune forgets the Reconcilers of Services no longer selected (after a
// full reconcile only: a partial one does not see them all).
func (f *Fleet) prune(chosen []services.Selected, full bool) {
	if !full {
		return
	}
	keep := map[string]bool{}
	for _, s := range chosen {
		keep[s.Key()] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.runners {
		if !keep[k] {
			delete(f.runners, k)
		}
	}
}

// isClassBackend says whether a backend is named as a class Service's
// (services.ClassNames), so may be one this instance made.
func isClassBackend(b string) bool { return strings.HasPrefix(b, "be_"+services.ClassPrefix) }

// deletedAll reports whether some left class backend's reconcile deleted
// servers and left none behind on any target.
func deletedAll(jobs []job, out []reconcile.Result) bool {
	found := false
	for i, j := range jobs {
		if j.svc != nil || !isClassBackend(j.backend) || out[i].Status == reconcile.StatusError {
			continue
		}
		deleted, kept := false, false
		for _, t := range out[i].Targets {
			deleted = deleted || len(t.Delete) > 0
			for _, n := range t.Servers {
				kept = kept || n > 0
			}
		}
		found = found || deleted && !kept
	}
	return found
}

func classOf(chosen []services.Selected) []services.Selected {
	out := []services.Selected{}
	for _, s := range chosen {
		if s.Class {
			out = append(out, s)
		}
	}
	return out
}

func isClass(chosen []services.Selected, key string) bool {
	for _, s := range chosen {
		if s.Key() == key {
			return s.Class
		}
	}
	return false
}

func dedupe(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}
