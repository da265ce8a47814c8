// Package events tells Kubernetes what the sync did, as Events on the
// followed Service, so that `kubectl describe svc` shows it: one per
// reconcile that changed something or failed, none for a reconcile that
// changed nothing (SERVICE_EVENTS=true).
//
// Writes are bounded as client-go's event recorder bounds them (the service
// does not link client-go's recorder: it would register every API group's
// types, see sync/kube.Client): an Event equal to a recent one (same type,
// reason and message) raises that one's count instead of adding another;
// more than 10 similar ones (same type and reason) within 10 minutes are
// folded into one "(combined from similar events)" Event; and a token
// bucket per Service (25 at once, then one every 5 minutes) drops the rest.
// That memory is the only state the service keeps, and it only saves Event
// writes: losing it (a restart) costs a few more.
package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/cut"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// Reasons of the Events.
const (
	ReasonAdded   = "ServersAdded"
	ReasonUpdated = "ServersUpdated"
	ReasonDrained = "ServersDrained"
	ReasonRemoved = "ServersRemoved"
	// ReasonChanged: several kinds of change at once.
	ReasonChanged = "ServersChanged"
	ReasonFailed  = "SyncFailed"
	// ReasonMisconfigured: the configuration matches nothing in
	// Kubernetes (desired.Warning), e.g. a Service port not found.
	ReasonMisconfigured = "Misconfigured"
)

// Bounds, as client-go's recorder has them.
const (
	burst         = 25
	refill        = 5 * time.Minute
	similarMax    = 10
	window        = 10 * time.Minute
	maxRemembered = 256
	maxMessage    = 1024
	queueLen      = 16
	writeTimeout  = 10 * time.Second
)

// Sink writes Events: sync/kube.Client.
type Sink interface {
	CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
	// PatchEvent sets an Event's count, last time and message.
	PatchEvent(ctx context.Context, namespace, name string, count int32, last metav1.Time, message string) (*corev1.Event, error)
}

// Recorder records reconciles as Events on one Service.
type Recorder struct {
	sink               Sink
	namespace, service string
	host               string
	log                *slog.Logger
	now                func() time.Time
	queue              chan event

	mu      sync.Mutex
	tokens  float64
	filled  time.Time
	recent  map[string]*written // by type, reason and message; and by type and reason for the combined one
	similar map[string][]time.Time
	// uid is the Service's UID as the last reconcile that read it saw:
	// a failed read has none, and `kubectl describe` finds Events by it.
	uid types.UID
	// OnWrite, when set, is told of each write: "create", "patch" or
	// "dropped" (the bucket was empty or the queue full).
	OnWrite func(op string)
}

type written struct {
	name  string
	count int32
	at    time.Time
}

type event struct {
	r                    *Recorder
	uid                  types.UID
	typ, reason, message string
	at                   time.Time
}

// New returns a Recorder of Events about Service namespace/service,
// reported by host (the pod's name). Run writes them.
func New(sink Sink, namespace, service, host string, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{sink: sink, namespace: namespace, service: service, host: host, log: log,
		now: time.Now, queue: make(chan event, queueLen), tokens: burst,
		recent: map[string]*written{}, similar: map[string][]time.Time{}}
}

// Wrap returns r's reconciler: each real reconcile's result is recorded
// after it is answered, never holding the caller.
func (r *Recorder) Wrap(run reconcile.Runner) reconcile.Runner { return recording{r, run} }

type recording struct {
	r   *Recorder
	run reconcile.Runner
}

func (w recording) Reconcile(ctx context.Context, dryRun bool) (reconcile.Result, error) {
	res, err := w.run.Reconcile(ctx, dryRun)
	if !dryRun {
		w.r.Observe(res, err)
	}
	return res, err
}

// Observe queues the Events a reconcile's result calls for, if any: a
// warning that the configuration matches nothing (Misconfigured), and what
// Describe says, unless that is the failure the warning explains. A Service
// that does not exist gets no Event. It never blocks (a full queue drops
// them).
func (r *Recorder) Observe(res reconcile.Result, err error) {
	message, misconfigured, missing := Misconfiguration(res)
	if missing {
		return // the log and the result say it; there is no object to tell
	}
	if misconfigured {
		r.queueEvent(res.ServiceUID, corev1.EventTypeWarning, ReasonMisconfigured, message)
		if err != nil && !errors.Is(err, reconcile.ErrTargets) {
			return // the Kubernetes side failed for the reason just told
		}
	}
	typ, reason, message, ok := Describe(res, err)
	if !ok {
		return
	}
	r.queueEvent(res.ServiceUID, typ, reason, message)
}

// Warn queues a Warning Event with reason and message on the Service,
// whose UID is uid (many-Services mode: a refusal, a failed frontend).
func (r *Recorder) Warn(uid types.UID, reason, message string) {
	r.queueEvent(uid, corev1.EventTypeWarning, reason, cut.To(message, maxMessage))
}

// Misconfiguration returns the message of a Misconfigured Event for res's
// warnings (ok false when there is none to write), and whether the
// Service does not exist. A Node-mode Service port without a nodePort is
// left to the log and the result: pods on the host network make it right.
func Misconfiguration(res reconcile.Result) (message string, ok, serviceMissing bool) {
	var parts []string
	for _, w := range res.Warnings {
		switch w.Reason {
		case desired.WarnServiceNotFound:
			return "", false, true
		case desired.WarnNoNodePort:
			continue
		}
		parts = append(parts, w.Message)
	}
	if len(parts) == 0 {
		return "", false, false
	}
	return cut.To(strings.Join(parts, "; "), maxMessage), true, false
}

func (r *Recorder) queueEvent(uid types.UID, typ, reason, message string) {
	select {
	case r.queue <- event{r: r, uid: uid, typ: typ, reason: reason, message: message, at: r.now()}:
	default:
		r.wrote("dropped")
		r.log.Debug("event dropped: queue full", "reason", reason)
	}
}

// Run writes queued Events until ctx ends.
func (r *Recorder) Run(ctx context.Context) { drain(ctx, r.queue) }

// drain writes the Events of queue, each by its Recorder, until ctx ends.
func drain(ctx context.Context, queue <-chan event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-queue:
			wctx, cancel := context.WithTimeout(ctx, writeTimeout)
			if err := ev.r.write(wctx, ev); err != nil {
				ev.r.log.Warn("event not written", "service", ev.r.namespace+"/"+ev.r.service, "reason", ev.reason, "error", err)
			}
			cancel()
		}
	}
}

// errDropped means the bucket was empty.
var errDropped = errors.New("too many events: dropped")

// write creates ev, or raises the count of the recent Event it repeats.
func (r *Recorder) write(ctx context.Context, ev event) error {
	r.mu.Lock()
	if ev.uid != "" {
		r.uid = ev.uid
	}
	ev.uid = r.uid
	if !r.take(ev.at) {
		r.mu.Unlock()
		r.wrote("dropped")
		r.log.Debug("event dropped: bucket empty", "reason", ev.reason)
		return nil
	}
	key := ev.typ + "\x00" + ev.reason + "\x00" + ev.message
	simKey := ev.typ + "\x00" + ev.reason
	times := append(r.similar[simKey], ev.at)
	for len(times) > 0 && ev.at.Sub(times[0]) > window {
		times = times[1:]
	}
	r.similar[simKey] = times
	if len(times) > similarMax {
		key = simKey + "\x00combined"
		ev.message = cut.To("(combined from similar events): "+ev.message, maxMessage)
	}
	prev := r.recent[key]
	if prev != nil && ev.at.Sub(prev.at) > window {
		prev = nil
	}
	r.mu.Unlock()

	if prev != nil {
		_, err := r.sink.PatchEvent(ctx, r.namespace, prev.name, prev.count+1, metav1.NewTime(ev.at), ev.message)
		if err == nil {
			r.remember(key, written{name: prev.name, count: prev.count + 1, at: ev.at})
			r.wrote("patch")
			return nil
		}
		// Gone (expired, deleted): write a new one.
	}
	t := metav1.NewTime(ev.at)
	created, err := r.sink.CreateEvent(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", r.service, ev.at.UnixNano()), Namespace: r.namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: r.namespace,
			Name: r.service, UID: ev.uid},
		Type: ev.typ, Reason: ev.reason, Message: ev.message,
		Source:         corev1.EventSource{Component: "haproxy-k8s-sync", Host: r.host},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: "haproxy-k8s-sync.io/sync", ReportingInstance: r.host,
	})
	if err != nil {
		return fmt.Errorf("create event on service %s/%s: %w", r.namespace, r.service, err)
	}
	r.remember(key, written{name: created.Name, count: 1, at: ev.at})
	r.wrote("create")
	return nil
}

// take spends a token of the bucket, if there is one (r.mu held).
func (r *Recorder) take(now time.Time) bool {
	if !r.filled.IsZero() {
		r.tokens = min(burst, r.tokens+float64(now.Sub(r.filled))/float64(refill))
	}
	r.filled = now
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}

func (r *Recorder) remember(key string, w written) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.recent[key]; !ok && len(r.recent) >= maxRemembered {
		oldest := ""
		for k, v := range r.recent {
			if oldest == "" || v.at.Before(r.recent[oldest].at) {
				oldest = k
			}
		}
		delete(r.recent, oldest)
	}
	r.recent[key] = &w
	if len(r.similar) > maxRemembered {
		clear(r.similar)
	}
}

func (r *Recorder) wrote(op string) {
	if r.OnWrite != nil {
		r.OnWrite(op)
	}
}

// Describe returns the Event a reconcile's result calls for: a warning for
// a failure, a normal Event naming the servers changed per target and
// backend, or none (ok false) for a reconcile that changed nothing.
func Describe(res reconcile.Result, err error) (typ, reason, message string, ok bool) {
	if err != nil {
		msg := err.Error()
		if errors.Is(err, reconcile.ErrTargets) {
			msg += targetErrors(res)
		}
		return corev1.EventTypeWarning, ReasonFailed, cut.To(msg, maxMessage), true
	}
	if res.Status != reconcile.StatusApplied {
		return "", "", "", false
	}
	kinds := map[string]bool{}
	var parts []string
	for _, t := range res.Targets {
		var changes []string
		for _, l := range []struct {
			verb, reason string
			names        []string
		}{
			{"added", ReasonAdded, t.Add}, {"updated", ReasonUpdated, t.Update}, {"drained", ReasonDrained, t.Drain},
			{"put in maintenance", ReasonDrained, t.Maint}, {"removed", ReasonRemoved, t.Delete},
		} {
			if len(l.names) > 0 {
				kinds[l.reason] = true
				changes = append(changes, fmt.Sprintf("%s %d (%s)", l.verb, len(l.names), names(l.names)))
			}
		}
		if len(changes) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s: %s", t.Target, t.Backend, strings.Join(changes, ", ")))
		}
	}
	if len(parts) == 0 {
		return "", "", "", false
	}
	reason = ReasonChanged
	if len(kinds) == 1 {
		for k := range kinds {
			reason = k
		}
	}
	return corev1.EventTypeNormal, reason, cut.To(strings.Join(parts, "; "), maxMessage), true
}

// names lists up to 5 names, then how many more.
func names(list []string) string {
	if len(list) <= 5 {
		return strings.Join(list, " ")
	}
	return fmt.Sprintf("%s +%d more", strings.Join(list[:5], " "), len(list)-5)
}

// targetErrors names the failed targets' errors after a reconcile's own.
func targetErrors(res reconcile.Result) string {
	var out []string
	for _, t := range res.Targets {
		if t.Error != "" {
			out = append(out, fmt.Sprintf("%s %s: %s", t.Target, t.Backend, t.Error))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, "; ")
}
