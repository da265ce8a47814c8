// Package handler is the HTTP surface: it turns a request into one full
// reconcile and the reconcile's result into a status code and JSON.
//
//	POST /reconcile, POST /  one reconcile (shared with concurrent callers);
//	                         ?dryRun=true plans without applying; in
//	                         many-Services mode ?service=namespace/name
//	                         reconciles that Service alone, and so does a
//	                         CloudEvent about some Services (ServicesFleet)
//	GET  /plan               the plan as it would be applied now
//	GET  /drained            whether a node's or pod's server is out of
//	                         rotation with no sessions on every target
//	GET  /healthz, /readyz   liveness and readiness
//	GET  /metrics            Prometheus metrics
//
// Every route but the probes and /metrics needs auth (package auth), checked
// from the headers before any body is read. POST bodies are read by package
// trigger: an event that clearly concerns another object is answered 202
// "ignored" with no Kubernetes or HAProxy call. An upstream failure
// (Kubernetes or an HAProxy target) answers 503 with Retry-After, never 500:
// Knative sources retry 503 but not 500.
//
// Work per caller is bounded: at most MaxWaiters callers wait for a real
// reconcile and MaxDryRuns for a dry run (dry runs share one in-flight run
// too); the excess gets 429 with Retry-After at once. A caller waits at most
// Config.Wait, then gets 503: every answer fits the server's WriteTimeout and
// the shutdown grace.
package handler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/auth"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/drained"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// MaxBody is the largest request body accepted (1 MiB).
const MaxBody = 1 << 20

// retryAfter is sent with 503: long enough for a restarting API to come back.
const retryAfter = "5"

// retryAfterPermanent is sent with a 503 whose failure is permanent
// (errorClass "permanent"): a backend HAProxy cannot manage as configured.
const retryAfterPermanent = "60"

// Default bounds of the work callers can ask for.
const (
	// DefaultMaxWaiters bounds the callers waiting for a real reconcile.
	DefaultMaxWaiters = 32
	// DefaultMaxDryRuns bounds the callers waiting for a dry run.
	DefaultMaxDryRuns = 8
	// DefaultMaxDrainWaiters bounds the callers of GET /drained; each
	// reads every target twice a second while it waits.
	DefaultMaxDrainWaiters = 16
)

// Drainer answers GET /drained: *drained.Checker.
type Drainer interface {
	Wait(ctx context.Context, q drained.Query, bound time.Duration) drained.Answer
}

// Config is what the handler needs.
type Config struct {
	// Reconciler runs a reconcile; the handler shares real runs between
	// concurrent callers and runs dry runs on their own.
	Reconciler reconcile.Runner
	// Shared, when set, is the coalescer real runs go through, so that
	// requests share reconciles with the service's own pokes (watch,
	// resync); nil means one of the handler's own around Reconciler.
	Shared *reconcile.Coalescer
	// Target says which events concern this service; others are ignored.
	Target trigger.Target
	// Auth checks every route but the probes and /metrics; nil lets every
	// request in (the service always sets one: see package auth).
	Auth auth.Authenticator
	// OnAuthFailure, when set, is called with the reason of each refused
	// request (missing, invalid, forbidden, busy, unavailable).
	OnAuthFailure func(reason string)
	// Wait bounds how long a caller waits for its reconcile (0: as long as
	// its request lasts); past it the answer is 503 with Retry-After.
	Wait time.Duration
	// MaxWaiters and MaxDryRuns bound the callers waiting for a real
	// reconcile and for a dry run (0: the defaults).
	MaxWaiters, MaxDryRuns int
	// Drained, when set, serves GET /drained; NodeMode says servers are
	// named after Nodes, so ?node= is accepted. MaxDrainWaiters bounds its
	// callers (0: the default).
	Drained         Drainer
	NodeMode        bool
	MaxDrainWaiters int
	// Ready reports readiness; nil means always ready.
	Ready func() bool
	// Metrics, when set, serves GET /metrics (open, like the probes).
	Metrics http.Handler
	// Fleet, when set, is the many-Services mode: POST /reconcile and GET
	// /plan run it (?service=namespace/name: that Service alone), and
	// Reconciler is not used.
	Fleet Fleet
	// OnIgnored, when set, is called for each ignored event.
	OnIgnored func()
	Log       *slog.Logger
}

type api struct {
	cfg    Config
	shared *reconcile.Coalescer
	dry    *reconcile.Coalescer
	// waiters, dryRuns and drainWaiters hold a token per waiting caller.
	waiters, dryRuns, drainWaiters chan struct{}
	log                            *slog.Logger
	fleetAll                       *sharedRuns
}

// New returns the service's routes.
func New(cfg Config) http.Handler {
	a := &api{cfg: cfg, log: cfg.Log}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.shared = cfg.Shared
	if cfg.Fleet != nil {
		a.fleetAll = &sharedRuns{run: func(ctx context.Context) (fleet.Result, error) { return cfg.Fleet.Reconcile(ctx, false) }}
	}
	if a.shared == nil {
		a.shared = reconcile.NewCoalescer(func(ctx context.Context) (reconcile.Result, error) {
			return cfg.Reconciler.Reconcile(ctx, false)
		})
	}
	a.dry = reconcile.NewCoalescer(func(ctx context.Context) (reconcile.Result, error) {
		return cfg.Reconciler.Reconcile(ctx, true)
	})
	a.waiters = make(chan struct{}, cmp.Or(cfg.MaxWaiters, DefaultMaxWaiters))
	a.dryRuns = make(chan struct{}, cmp.Or(cfg.MaxDryRuns, DefaultMaxDryRuns))
	a.drainWaiters = make(chan struct{}, cmp.Or(cfg.MaxDrainWaiters, DefaultMaxDrainWaiters))
	r := chi.NewRouter()
	r.Use(a.recoverPanics)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "not found")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if cfg.Ready != nil && !cfg.Ready() {
			writeError(w, http.StatusServiceUnavailable, "not ready")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	if cfg.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", cfg.Metrics)
	}
	r.Group(func(r chi.Router) {
		r.Use(a.authorize)
		r.Get("/plan", func(w http.ResponseWriter, r *http.Request) {
			if cfg.Fleet != nil {
				a.postFleet(w, r, true, nil)
				return
			}
			a.run(w, r, trigger.Trigger{Kind: "plan"}, true)
		})
		if cfg.Drained != nil {
			r.Get("/drained", a.drained)
		}
		r.Post("/reconcile", a.post)
		r.Post("/", a.post)
	})
	return r
}

// authorize lets through only requests the Authenticator accepts; it reads
// headers only, so the body of a refused request is never read.
func (a *api) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.cfg.Auth != nil {
			if err := a.cfg.Auth.Authenticate(r.Context(), r.Header, remoteIP(r.RemoteAddr)); err != nil {
				status, reason := http.StatusUnauthorized, "invalid"
				var ae *auth.Error
				if errors.As(err, &ae) {
					status, reason = ae.Status, ae.Reason
				}
				if a.cfg.OnAuthFailure != nil {
					a.cfg.OnAuthFailure(reason)
				}
				a.log.Info("request refused", "path", r.URL.Path, "status", status, "reason", reason)
				switch status {
				case http.StatusUnauthorized:
					w.Header().Set("WWW-Authenticate", `Bearer realm="haproxy-k8s-sync"`)
				case http.StatusTooManyRequests, http.StatusServiceUnavailable:
					w.Header().Set("Retry-After", "1")
				}
				writeError(w, status, err.Error())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a panic in a handler into a 500 JSON answer and a log
// line; the process keeps serving.
func (a *api) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				a.log.Error("panic in handler", "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				writeError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (a *api) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "body over 1 MiB")
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "read body: "+trigger.Short(err.Error()))
		return
	}
	if a.cfg.Fleet != nil {
		a.postFleet(w, r, r.URL.Query().Get("dryRun") == "true", body)
		return
	}
	if key, why := serviceKey(r); why != "" || key != "" && key != a.cfg.Target.Namespace+"/"+a.cfg.Target.Service {
		// One Service is followed: naming another is a mistake, not a no-op.
		writeError(w, http.StatusBadRequest, cmp.Or(why, "service: "+trigger.Short(key)+" is not the Service this instance follows ("+a.cfg.Target.Namespace+"/"+a.cfg.Target.Service+")"))
		return
	}
	tr, err := trigger.Parse(r.Header, body, a.cfg.Target)
	if err != nil {
		status := http.StatusBadRequest
		var te *trigger.Error
		if errors.As(err, &te) {
			status = te.Status
		}
		a.log.Info("request rejected", "status", status, "error", err.Error())
		writeError(w, status, err.Error())
		return
	}
	if tr.Ignore != "" {
		if a.cfg.OnIgnored != nil {
			a.cfg.OnIgnored()
		}
		a.log.Info("event ignored", "trigger", tr.Kind, "id", tr.ID, "type", tr.Type, "reason", tr.Ignore)
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "ignored", "reason": tr.Ignore})
		return
	}
	a.run(w, r, tr, r.URL.Query().Get("dryRun") == "true")
}

func (a *api) run(w http.ResponseWriter, r *http.Request, tr trigger.Trigger, dryRun bool) {
	id := tr.ID
	if id == "" {
		id = trigger.NewID()
	}
	log := a.log.With("trigger", tr.Kind, "id", id, "type", tr.Type)
	shared, slots := a.shared, a.waiters
	if dryRun {
		shared, slots = a.dry, a.dryRuns
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		log.Warn("too many callers waiting", "dryRun", dryRun, "limit", cap(slots))
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "too many callers waiting for a reconcile; try again")
		return
	}
	ctx := r.Context()
	if a.cfg.Wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.Wait)
		defer cancel()
	}
	res, err := shared.Do(ctx)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller is gone; nobody reads the answer
		}
		if pe := (*reconcile.PanicError)(nil); errors.As(err, &pe) {
			log.Error("panic in handler", "where", "reconcile", "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
			writeError(w, http.StatusInternalServerError, "internal error")
			return
		}
		if ctx.Err() != nil {
			msg := lateMessage(err, a.cfg.Wait)
			log.Warn("reconcile did not end in time", "waitedMs", a.cfg.Wait.Milliseconds(), "error", msg)
			w.Header().Set("Retry-After", retryAfter)
			writeError(w, http.StatusServiceUnavailable, msg)
			return
		}
		log.Error("reconcile failed", "status", res.Status, "error", err, "errorClass", res.ErrorClass, "durationMs", res.DurationMs, "targets", res.Targets)
		res.LogWarnings(log)
		w.Header().Set("Retry-After", retryAfter)
		if res.ErrorClass == failure.Permanent {
			// Still 503 (Knative retries nothing else from a direct
			// source), but nothing helps until the configuration changes.
			w.Header().Set("Retry-After", retryAfterPermanent)
		}
		writeJSON(w, http.StatusServiceUnavailable, res)
		return
	}
	log.Info("reconcile", "status", res.Status, "desired", res.Desired, "dryRun", dryRun, "durationMs", res.DurationMs, "targets", res.Targets)
	res.LogWarnings(log)
	writeJSON(w, http.StatusOK, res)
}

// maxCause bounds each target's error quoted in a late answer.
const maxCause = 500

// lateMessage says that the caller's reconcile did not end within its wait
// and, when the reconcile it waited behind ended meanwhile, how: the last
// error of each of its failed targets, which is most often why.
func lateMessage(err error, wait time.Duration) string {
	msg := "the reconcile did not end in time"
	if wait > 0 {
		msg += " (waited " + wait.String() + ")"
	}
	var late *reconcile.LateError
	if !errors.As(err, &late) || late.Before == nil {
		return msg + "; try again"
	}
	if late.BeforeErr == nil {
		return msg + "; the reconcile before it ended " + late.Before.Status + "; try again"
	}
	var causes []string
	for _, t := range late.Before.Targets {
		if t.Error != "" {
			causes = append(causes, t.Target+" backend "+t.Backend+": "+cut.To(t.Error, maxCause))
		}
	}
	if len(causes) == 0 {
		causes = append(causes, cut.To(late.BeforeErr.Error(), maxCause))
	}
	return msg + "; the reconcile before it, which it waited for, failed: " + strings.Join(causes, "; ") + "; try again"
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"status": "error", "error": msg})
}

// remoteIP is the address part of a RemoteAddr ("ip:port").
func remoteIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WaitMargin is what a caller may wait beyond the reconcile timeout: the
// reconcile's own clean-up (deleting an open transaction, up to 1 s).
const WaitMargin = 2 * time.Second

// Server returns an http.Server for h with every timeout set, so a slow
// client cannot hold a connection. WriteTimeout covers a caller's whole
// wait (reconcile timeout + WaitMargin) with room to write the answer.
func Server(addr string, h http.Handler, reconcileTimeout time.Duration) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      reconcileTimeout + WaitMargin + 5*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}
