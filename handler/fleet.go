package handler

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/trigger"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
)

// Fleet runs many-Services reconciles: a *fleet.Fleet.
type Fleet interface {
	Reconcile(ctx context.Context, dryRun bool) (fleet.Result, error)
	ReconcileService(ctx context.Context, key string, dryRun bool) (fleet.Result, error)
}

// ServicesFleet is a Fleet that reconciles several Services together
// (fleet.Lanes): what a CloudEvent about some Services asks for. A Fleet
// that is not one reconciles every Service for such an event.
type ServicesFleet interface {
	ReconcileServices(ctx context.Context, keys []string) (fleet.Result, error)
}

// MaxEventKeys bounds the Services one request's CloudEvents may name for
// a reconcile of those alone; past it, one reconcile of every Service
// costs less than so many of one.
const MaxEventKeys = 64

// serviceKey reads ?service=namespace/name; why says what is wrong with a
// malformed one.
func serviceKey(r *http.Request) (key, why string) {
	key = r.URL.Query().Get("service")
	if key == "" {
		return "", ""
	}
	ns, name, found := strings.Cut(key, "/")
	if !found || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Label(name)) > 0 {
		return key, "service: " + trigger.Short(key) + " is not namespace/name"
	}
	return key, ""
}

// postFleet answers POST /reconcile in many-Services mode: every selected
// Service, ?service=namespace/name alone, or, when the body is a Knative
// CloudEvent about some Services (trigger.Keys) and the Fleet can
// (ServicesFleet), those alone; body was read and bounded by post.
func (a *api) postFleet(w http.ResponseWriter, r *http.Request, dryRun bool, body []byte) {
	key, why := serviceKey(r)
	if why != "" {
		writeError(w, http.StatusBadRequest, why)
		return
	}
	var keys []string
	if _, ok := a.cfg.Fleet.(ServicesFleet); ok && key == "" && !dryRun && len(body) > 0 {
		got, all, err := trigger.Keys(r.Header, body)
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
		if !all && len(got) <= MaxEventKeys {
			keys = got
		}
	}
	slots := a.waiters
	if dryRun {
		slots = a.dryRuns
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
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
	var res fleet.Result
	var err error
	switch {
	case key != "":
		res, err = a.cfg.Fleet.ReconcileService(ctx, key, dryRun)
	case keys != nil:
		res, err = a.cfg.Fleet.(ServicesFleet).ReconcileServices(ctx, keys)
	case dryRun:
		res, err = a.cfg.Fleet.Reconcile(ctx, true)
	default:
		res, err = a.fleetAll.do(ctx)
	}
	log := a.log.With("service", key, "dryRun", dryRun)
	if keys != nil {
		log = a.log.With("services", keys, "dryRun", dryRun)
	}
	var nse *fleet.NotSelectedError
	switch {
	case errors.As(err, &nse):
		writeError(w, http.StatusNotFound, nse.Error())
	case err != nil && r.Context().Err() != nil:
		// the caller is gone; nobody reads the answer
	case err != nil && ctx.Err() != nil:
		msg := lateMessage(nil, a.cfg.Wait)
		log.Warn("reconcile did not end in time", "waitedMs", a.cfg.Wait.Milliseconds())
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, msg)
	case err != nil:
		log.Error("reconcile failed", "status", res.Status, "error", err, "errorClass", res.ErrorClass, "services", len(res.Services), "durationMs", res.DurationMs)
		w.Header().Set("Retry-After", retryAfter)
		if res.ErrorClass == failure.Permanent {
			w.Header().Set("Retry-After", retryAfterPermanent)
		}
		writeJSON(w, http.StatusServiceUnavailable, res)
	default:
		log.Info("reconcile", "status", res.Status, "services", len(res.Services), "refused", len(res.Refused), "durationMs", res.DurationMs)
		writeJSON(w, http.StatusOK, res)
	}
}

// sharedRuns shares full many-Services reconciles between concurrent
// callers as reconcile.Coalescer does for one Service: a caller that
// arrives while one runs waits for the next, which starts when it ends and
// serves every caller that arrived meanwhile; so each caller gets a
// reconcile that began after its request, and a burst costs two. A shared
// run is no one caller's: it runs to its end, each Service bounded by the
// reconcile timeout.
type sharedRuns struct {
	run func(context.Context) (fleet.Result, error)

	mu      sync.Mutex
	running bool
	next    *fleetCall
}

type fleetCall struct {
	done chan struct{}
	res  fleet.Result
	err  error
}

func (s *sharedRuns) do(ctx context.Context) (fleet.Result, error) {
	s.mu.Lock()
	c := s.next
	if c == nil {
		c = &fleetCall{done: make(chan struct{})}
		s.next = c
		if !s.running {
			s.start()
		}
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return fleet.Result{}, ctx.Err()
	}
}

// start runs the waiting call; s.mu is held.
func (s *sharedRuns) start() {
	c := s.next
	s.next, s.running = nil, true
	go func() {
		c.res, c.err = s.run(context.Background())
		close(c.done)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.running = false
		if s.next != nil {
			s.start()
		}
	}()
}
