// Package watch notices by itself when what the desired state is computed
// from changes — the followed Service, its EndpointSlices and, in node mode,
// the Nodes — and turns each change that can matter into a poke: a request
// for one full reconcile. Nothing a watch sees is used to compute the desired
// state; every reconcile still reads Kubernetes afresh, so the service keeps
// no state that a reconcile depends on, and a lost event costs only latency.
//
// Each resource has one watch loop:
//
//  1. list (paged; only one item for the Service and the slices, since the
//     list is only there for its resourceVersion; every Node for the Nodes,
//     to know each one's fingerprint, see below; every slice in
//     many-Services node mode, for the Nodes they name, nodeindex.go);
//  2. watch from that resourceVersion with bookmarks, so a restart resumes
//     where the last event or bookmark left off;
//  3. on a closed connection or an error, restart with backoff; on 410 Gone
//     (the resourceVersion is too old) list again. Every restart is followed
//     by a poke, since changes may have been missed in the gap.
//
// Node events are the bulk of a large cluster's traffic: every kubelet
// updates its Node's status every few minutes, changing only heartbeat times.
// The Node loop keeps one 64-bit fingerprint per Node of the fields that can
// change a server (addresses, the Ready condition, unschedulable, taints,
// labels, this project's annotations) and pokes only when it changes, when a
// Node appears or when one goes. The fingerprints serve only this filter.
//
// Watcher follows one Service (the single-Service mode). Many follows every
// Service that may select itself (many-Services mode) with the same loops,
// and pokes only the Service an event concerns, through a Queue that
// coalesces pokes per Service and bounds them. Manifests does the same for
// the files `serve --manifests` reads instead of the Kubernetes API, by
// polling a digest of them.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// The kinds of watched objects, as metrics and logs name them.
const (
	KindService       = "service"
	KindEndpointSlice = "endpointslice"
	KindNode          = "node"
)

// nodePage bounds one page of the Node list (and so the memory it takes:
// about 100 x 15 KB for realistic Nodes).
const nodePage = 100

// Client is what a Watcher asks of the Kubernetes API; a *kube.Client is one.
type Client interface {
	ListServices(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ServiceList, error)
	WatchServices(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	ListEndpointSlices(ctx context.Context, namespace string, opts metav1.ListOptions) (*discoveryv1.EndpointSliceList, error)
	WatchEndpointSlices(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Watcher watches one Service's objects and pokes on every change that can
// matter. Run it once.
type Watcher struct {
	Client    Client
	Namespace string
	Service   string
	// Nodes says whether Nodes are watched too (node mode).
	Nodes bool
	// Poke asks for a full reconcile; it must not block. reason says why
	// ("endpointslice MODIFIED", "node restart", ...).
	Poke func(reason string)
	// OnEvent, when set, is called for every event received, with the kind
	// of object, the event type and whether it caused a poke.
	OnEvent func(kind string, typ watch.EventType, poked bool)
	// OnRestart, when set, is called when a watch of kind restarts.
	OnRestart func(kind string)
	// MinBackoff and MaxBackoff bound the wait before a watch restarts after
	// a failure (defaults 250ms and 30s; doubled per failure, with jitter).
	MinBackoff, MaxBackoff time.Duration
	Log                    *slog.Logger

	// established counts the loops whose watch was established at least
	// once, of want loops.
	established, want atomic.Int32
}

// Established reports whether every watch has been established at least once.
func (w *Watcher) Established() bool {
	want := w.want.Load()
	return want > 0 && w.established.Load() == want
}

// Run watches until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	w.run(ctx, w.resources())
}

// run keeps one loop per resource until ctx is done.
func (w *Watcher) run(ctx context.Context, rs []resource) {
	w.want.Store(int32(len(rs)))
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, r)
		}()
	}
	wg.Wait()
}

// resource is what a watch loop needs to know of one kind of object.
type resource struct {
	kind  string
	page  int64
	list  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// filter, when set, sees every listed object and every event, and says
	// whether an event can matter; nil means every event matters.
	filter filter
	// namespace, when set, is logged: the many-Services watch runs one loop
	// per namespace.
	namespace string
	// on, when set, handles every event but bookmarks and errors instead of
	// the filter and the poke, and says whether it poked (the many-Services
	// watch pokes the one Service an event concerns).
	on func(ev watch.Event) bool
}

// listEnder is a filter that wants to know when a whole list was seen.
type listEnder interface {
	listDone()
}

// filter decides which events can change the desired state.
type filter interface {
	// reset starts a new list.
	reset()
	// listed records one listed object.
	listed(obj runtime.Object)
	// matters records an event and says whether it can matter.
	matters(ev watch.Event) bool
}

func (w *Watcher) resources() []resource {
	byName := fields.OneTermEqualSelector("metadata.name", w.Service).String()
	bySvc := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: w.Service}).String()
	out := []resource{
		{
			kind: KindService, page: 1,
			list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = byName
				return w.Client.ListServices(ctx, w.Namespace, o)
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = byName
				return w.Client.WatchServices(ctx, w.Namespace, o)
			},
		},
		{
			kind: KindEndpointSlice, page: 1,
			list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = bySvc
				return w.Client.ListEndpointSlices(ctx, w.Namespace, o)
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = bySvc
				return w.Client.WatchEndpointSlices(ctx, w.Namespace, o)
			},
		},
	}
	if w.Nodes {
		out = append(out, resource{
			kind: KindNode, page: nodePage,
			list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return w.Client.ListNodes(ctx, o)
			},
			watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return w.Client.WatchNodes(ctx, o)
			},
			filter: &NodeFilter{},
		})
	}
	return out
}

// errGone means the resourceVersion is too old: list again.
var errGone = errors.New("resource version too old")

// loop keeps one watch going until ctx is done.
func (w *Watcher) loop(ctx context.Context, r resource) {
	log := w.log().With("watch", r.kind)
	if r.namespace != "" {
		log = log.With("namespace", r.namespace)
	}
	rv := ""
	established := false
	failures := 0 // consecutive, for the backoff
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			if w.OnRestart != nil {
				w.OnRestart(r.kind)
			}
			if failures > 0 && !sleep(ctx, w.backoff(failures)) {
				return
			}
		}
		if rv == "" {
			var err error
			if rv, err = w.listAll(ctx, r); err != nil {
				failures++
				log.Warn("list failed; retrying", "error", err, "failures", failures)
				continue
			}
		}
		wi, err := r.watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			failures++
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				rv = ""
			}
			log.Warn("watch failed; retrying", "error", err, "failures", failures)
			continue
		}
		if !established {
			established = true
			w.established.Add(1)
			log.Debug("watch established", "resourceVersion", rv)
		}
		if attempt > 0 {
			// Changes may have happened while no watch ran.
			w.poke(r.kind + " restart")
		}
		var events int
		rv, events, err = w.consume(ctx, r, wi, rv)
		if ctx.Err() != nil {
			return
		}
		var relist bool
		failures, relist = afterWatch(failures, events, err)
		if relist {
			rv = ""
		}
		switch {
		case relist:
			log.Info("watch expired; listing again", "error", err, "failures", failures)
		case err != nil:
			log.Warn("watch error; restarting", "error", err, "failures", failures)
		case failures > 0:
			log.Debug("watch closed with no event; restarting")
		default:
			log.Debug("watch closed; resuming", "resourceVersion", rv)
		}
	}
}

// afterWatch decides, from how a watch ended (its events, the error event
// included, and its error), the consecutive failures that set the next
// backoff and whether to list again. Only a watch that delivered something
// is progress: a watch closed at once (something cutting connections) or
// expired at once (a server answering 410 to every watch) counts as a
// failure, or the loop would list and watch again without pause.
func afterWatch(failures, events int, err error) (next int, relist bool) {
	switch {
	case errors.Is(err, errGone) && events > 1:
		return 0, true
	case errors.Is(err, errGone):
		return failures + 1, true
	case err != nil, events == 0:
		return failures + 1, false
	default:
		return 0, false
	}
}

// listAll lists r (every page when it has a filter that must see every
// object; one item otherwise) and returns the list's resourceVersion.
func (w *Watcher) listAll(ctx context.Context, r resource) (string, error) {
	opts := metav1.ListOptions{Limit: r.page}
	if r.filter != nil {
		r.filter.reset()
	}
	rv := ""
	for {
		obj, err := r.list(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("list %ss: %w", r.kind, err)
		}
		lm, err := meta.ListAccessor(obj)
		if err != nil {
			return "", fmt.Errorf("list %ss: %w", r.kind, err)
		}
		if rv == "" {
			// The first page's version is that of the whole paged list.
			rv = lm.GetResourceVersion()
		}
		if r.filter == nil {
			return rv, nil
		}
		if err := meta.EachListItem(obj, func(o runtime.Object) error { r.filter.listed(o); return nil }); err != nil {
			return "", fmt.Errorf("list %ss: %w", r.kind, err)
		}
		if opts.Continue = lm.GetContinue(); opts.Continue == "" {
			if le, ok := r.filter.(listEnder); ok {
				le.listDone()
			}
			return rv, nil
		}
	}
}

// consume reads events until the watch ends and returns the newest
// resourceVersion seen and the number of events.
func (w *Watcher) consume(ctx context.Context, r resource, wi watch.Interface, rv string) (string, int, error) {
	defer wi.Stop()
	events := 0
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, events, ctx.Err()
		case ev, ok = <-wi.ResultChan():
		}
		if !ok {
			return rv, events, nil
		}
		events++
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if w.OnEvent != nil {
				w.OnEvent(r.kind, ev.Type, false)
			}
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				return rv, events, fmt.Errorf("%w: %v", errGone, err)
			}
			return rv, events, err
		}
		if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
			rv = m.GetResourceVersion()
		}
		poked := false
		switch {
		case ev.Type == watch.Bookmark:
		case r.on != nil:
			poked = r.on(ev)
		case r.filter == nil || r.filter.matters(ev):
			poked = true
			w.poke(r.kind + " " + string(ev.Type))
		}
		if w.OnEvent != nil {
			w.OnEvent(r.kind, ev.Type, poked)
		}
	}
}

func (w *Watcher) poke(reason string) {
	if w.Poke != nil {
		w.Poke(reason)
	}
}

// backoff is the wait before the n-th consecutive failed attempt: doubling
// from MinBackoff, capped at MaxBackoff, with up to 20% jitter.
func (w *Watcher) backoff(n int) time.Duration {
	lo, hi := w.MinBackoff, w.MaxBackoff
	if lo <= 0 {
		lo = 250 * time.Millisecond
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Watcher) log() *slog.Logger {
	if w.Log != nil {
		return w.Log
	}
	return slog.New(slog.DiscardHandler)
}
