package history

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reloads"
	svcs "github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// The many-Services histories (Setup.Services): web names be, as in every
// history; web2 (pods 5000-5002, always ready) names be2 while it has
// joined; web3 (pod 5100), created later, names be while a Duplicate lasts:
// web, the holder, keeps be and is followed as before; web3 is refused.
const (
	backend2 = "be2"
	service2 = "web2"
	service3 = "web3"
	// otherPods is the first pod number of Services other than web: the
	// evaluation of web's pods leaves them out.
	otherPods = 5000
)

var (
	web2Pods = []int{otherPods, otherPods + 1, otherPods + 2}
	web3Pods = []int{otherPods + 100}
)

// phase is web2's relation to be2.
type phase int

const (
	never  phase = iota // web2 never named be2: it has no server
	joined              // web2 names be2: its pods in service there
	left                // web2 named be2 and does not any more: parked
)

// services is the many-Services part of a world: the Services Kubernetes
// holds beside web, and the service's loop run through the fleet.
type services struct {
	w     *world
	live2 *desiredtest.Live
	live3 *desiredtest.Live

	mu     sync.Mutex
	phase  phase
	since  time.Time // web2's last step
	dup    bool      // web3 exists
	window bool      // web3 names be too: web keeps it, web3 is refused
	// windows counts the duplicates' windows.
	windows int
	// epoch counts web2's steps, so that a monitor read that spans one is
	// not judged.
	epoch atomic.Int64

	pokeKey func(key string)
	doKey   func(key string)
	left    func(backends []string)
}

// phaseNow is web2's phase.
func (s *services) phaseNow() phase {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase
}

// serviceObject is the Service name as Kubernetes holds it; in
// many-Services histories it names be (the annotation), or nothing.
func (w *world) serviceObject(name, be string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: "hist-" + types.UID(name)},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp", Port: 80, TargetPort: intstr.FromInt32(int32(w.k8sPort()))}}},
	}
	if w.setup.ports() && name == service {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "tcp2", Port: 81, TargetPort: intstr.FromInt32(int32(w.k8sPort()))})
	}
	if w.setup.Services && be != "" {
		svc.Annotations = map[string]string{svcs.Annotation: be}
	}
	svc.Spec.PublishNotReadyAddresses = w.setup.publishNotReady() && name == service
	if w.setup.Nodes > 0 {
		// Every Node's kube-proxy takes the Service on the port the pods
		// listen on, at its own address, and only to its own pods.
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = int32(w.k8sPort())
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		if w.setup.HealthPort && !w.setup.KubeProxy && name == service {
			// What kube-proxy answers for a load balancer's checks; the
			// API server takes it of a LoadBalancer alone.
			svc.Spec.Type = corev1.ServiceTypeLoadBalancer
			svc.Spec.HealthCheckNodePort = int32(w.hcPort)
		}
	}
	return svc
}

// readyInput is the Service name with every pod of pods ready.
func (w *world) readyInput(name string, pods []int) desired.Input {
	port, pname := int32(w.port), "tcp"
	sl := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-0", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: controllerManaged}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port}},
	}
	for _, n := range pods {
		yes, no := true, false
		ep := discoveryv1.Endpoint{
			Addresses:  []string{podAddr(n)},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: podName(n)},
		}
		if w.setup.Zones {
			z := localZone
			ep.Zone = &z
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return desired.Input{Service: w.serviceObject(name, ""), Slices: []discoveryv1.EndpointSlice{sl}}
}

// ListServices is the Services Kubernetes holds now (fleet.Fleet.Services).
func (s *services) ListServices(_ context.Context, ns string, _ metav1.ListOptions) (*corev1.ServiceList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &corev1.ServiceList{}
	if ns != "" && ns != namespace {
		return out, nil
	}
	out.Items = append(out.Items, *s.w.serviceObject(service, backend))
	be2 := ""
	if s.phase == joined {
		be2 = backend2
	}
	out.Items = append(out.Items, *s.w.serviceObject(service2, be2))
	if s.dup {
		out.Items = append(out.Items, *s.w.serviceObject(service3, backend))
	}
	return out, nil
}

// source is what the fleet reads of one Service.
func (s *services) source(_, name string) reconcile.Source {
	switch name {
	case service2:
		return s.live2
	case service3:
		return s.live3
	}
	return s.w.live
}

// newServices starts web2's and web3's pods.
func newServices(w *world) *services {
	s := &services{w: w, live2: desiredtest.NewLive(w.readyInput(service2, web2Pods)), live3: desiredtest.NewLive(w.readyInput(service3, web3Pods))}
	for _, n := range slices.Concat(web2Pods, web3Pods) {
		p := w.newPod(n)
		if err := p.start(); err != nil {
			w.t.Fatal(err)
		}
		w.t.Cleanup(p.stop)
		w.mu.Lock()
		w.pods[n] = p
		w.mu.Unlock()
	}
	return s
}

// kubeState is what the history's Kubernetes holds: web's Service, slices
// and Nodes, and in many-Services histories web2 (naming be2 while it has
// joined) and web3 (naming be while a duplicate lasts) with theirs.
func (w *world) kubeState() kubeState {
	st := stateOf(w.input())
	s := w.svc
	if s == nil {
		return st
	}
	s.mu.Lock()
	joined, dup := s.phase == joined, s.dup
	s.mu.Unlock()
	be2 := ""
	if joined {
		be2 = backend2
	}
	st.services = append(st.services, w.serviceObject(service2, be2))
	st.slices = append(st.slices, w.readyInput(service2, web2Pods).Slices...)
	if dup {
		st.services = append(st.services, w.serviceObject(service3, backend))
		st.slices = append(st.slices, w.readyInput(service3, web3Pods).Slices...)
	}
	return st
}

// startFleet starts web2's and web3's pods and the service's loop in
// many-Services mode: the fleet (SERVICE_SELECTION=annotation from cfg),
// each Service's reconciles in a coalescer of its own with the follow-up,
// as serve runs the one Service's, the left backends handed over as the
// watch does (fleet.ReconcileLeft), and the reload watch poking every
// Service. It returns web's poke and what stops it all.
func (w *world) startFleet(cfg config.Config) (poke func(), stop func()) {
	t := w.t
	s := newServices(w)
	w.svc = s
	log := serviceLog(t)
	rec, checks, watched := reconcilerOf(t, cfg, log)
	f := &fleet.Fleet{Services: s, Selection: cfg.Selecting(), Template: rec, Source: s.source, Log: log}
	if cfg.ReadinessGate {
		// Each Service's pods' verdicts, as serve's gate writer gets them
		// (web2's pods have numbers of their own).
		f.Gate = func(string) reconcile.PodGate { return w.writer(0) }
	}
	type loop struct {
		co     *reconcile.Coalescer
		follow *reconcile.FollowUp
	}
	var mu sync.Mutex
	loops := map[string]loop{}
	loopOf := func(key string, run func(ctx context.Context) (reconcile.Result, error)) *reconcile.Coalescer {
		mu.Lock()
		defer mu.Unlock()
		if l, ok := loops[key]; ok {
			return l.co
		}
		l := loop{co: reconcile.NewCoalescer(run), follow: &reconcile.FollowUp{Checks: checks}}
		l.co.Follow(l.follow, nil)
		loops[key] = l
		return l.co
	}
	loopFor := func(key string) *reconcile.Coalescer {
		return loopOf(key, func(ctx context.Context) (reconcile.Result, error) {
			res, err := f.ReconcileService(ctx, key, false)
			log.Debug("reconciled", "service", key, "result", res, "err", err)
			for _, r := range res.Services {
				if r.Service == key {
					return r.Result, err
				}
			}
			if err == nil {
				err = errors.New("no result")
			}
			return reconcile.Result{Status: reconcile.StatusError, Error: err.Error()}, err
		})
	}
	// Left backends: handed over once, as the watch does; a failed hand-over
	// is tried again by the follow-up's retry.
	var leftMu sync.Mutex
	var pending, failed []string
	leftLoop := loopOf("\x00left", func(ctx context.Context) (reconcile.Result, error) {
		leftMu.Lock()
		batch := slices.Compact(slices.Sorted(slices.Values(slices.Concat(pending, failed))))
		pending, failed = nil, nil
		leftMu.Unlock()
		res, err := f.ReconcileLeft(ctx, batch)
		log.Debug("reconciled left", "backends", batch, "result", res, "err", err)
		out := reconcile.Result{Status: res.Status, Error: res.Error, ErrorClass: res.ErrorClass}
		for _, l := range res.Left {
			if out.Targets == nil || l.Status == reconcile.StatusError {
				out = l.Result
			}
		}
		if err != nil {
			leftMu.Lock()
			failed = batch
			leftMu.Unlock()
		}
		return out, err
	})
	key := func(name string) string { return namespace + "/" + name }
	s.pokeKey = func(name string) { loopFor(key(name)).Poke() }
	s.doKey = func(name string) {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ReconcileTimeout)
		defer cancel()
		_, _ = loopFor(key(name)).Do(ctx)
	}
	s.left = func(backends []string) {
		leftMu.Lock()
		pending = append(pending, backends...)
		leftMu.Unlock()
		leftLoop.Poke()
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &reloads.Watcher{Targets: watched, Poke: func(string) {
		// A watch restart or resync reconciles every Service: the reload
		// watch does the same.
		for _, n := range []string{service, service2, service3} {
			s.pokeKey(n)
		}
	}}
	watching := make(chan struct{})
	go func() { rw.Run(ctx); close(watching) }()
	return func() { s.pokeKey(service) }, func() {
		cancel()
		<-watching
		mu.Lock()
		all := make([]loop, 0, len(loops))
		for _, l := range loops {
			all = append(all, l)
		}
		mu.Unlock()
		for _, l := range all {
			l.follow.Stop()
		}
		for _, l := range all {
			select {
			case <-l.co.Idle():
			case <-time.After(cfg.ReconcileTimeout + 5*time.Second):
			}
		}
	}
}

// apply carries out a many-Services step as the watch sees it: the
// Service's own key is poked, and a Service that stops naming a backend
// hands it over as left.
func (s *services) apply(st Step) error {
	w := s.w
	if w.mirror != nil {
		return s.applyServe(st)
	}
	switch st.Kind {
	case ServiceJoin, ServiceLeave:
		s.step2(st.Kind)
		s.pokeKey(service2)
		if st.Kind == ServiceLeave {
			s.left([]string{backend2})
		}
	case Duplicate:
		// Judged from a quiet be: what a reconcile that read before the
		// claim still does is not the claim's.
		b := BoundsOf(config.ShippedCheck())
		if why := w.waitConverged(b.Converge); why != "" {
			w.rec.add(obs{kind: obsViolation, inv: Converges, err: "before a duplicate claim, not within " + b.Converge.String() + ": " + why})
		}
		s.mu.Lock()
		s.dup = true
		s.mu.Unlock()
		// One reconcile of web after web3 exists (as a resync would run):
		// web keeps be, and none that read before still runs when the
		// window begins.
		s.doKey(service)
		s.mu.Lock()
		s.window = true
		s.windows++
		s.mu.Unlock()
		s.pokeKey(service3) // what the watch pokes for web3's creation
	case DuplicateEnd:
		s.mu.Lock()
		s.window, s.dup = false, false
		s.mu.Unlock()
		// As the watch does: web3's deletion pokes web3, and hands be, which
		// its old object named, over as left; the fleet must leave it to
		// web, which still names it: web's reconcile, never be parked.
		s.pokeKey(service3)
		s.left([]string{backend})
	}
	return nil
}

// step2 records web2's step k (ServiceJoin or ServiceLeave).
func (s *services) step2(k Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = left
	if k == ServiceJoin {
		s.phase = joined
	}
	s.since = time.Now()
	s.epoch.Add(1)
}

// applyServe carries out a many-Services step in a serve history: what
// Kubernetes holds changes, and serve's own watch (watch.Many) and lanes
// do the rest.
func (s *services) applyServe(st Step) error {
	w := s.w
	switch st.Kind {
	case ServiceJoin, ServiceLeave:
		s.step2(st.Kind)
	case Duplicate:
		b := BoundsOf(config.ShippedCheck())
		if why := w.waitConverged(b.Converge); why != "" {
			w.rec.add(obs{kind: obsViolation, inv: Converges, err: "before a duplicate claim, not within " + b.Converge.String() + ": " + why})
		}
		s.mu.Lock()
		s.dup, s.window = true, true
		s.windows++
		s.mu.Unlock()
	case DuplicateEnd:
		s.mu.Lock()
		s.window, s.dup = false, false
		s.mu.Unlock()
	}
	w.publish()
	return nil
}

// view is each server's address and whether it takes traffic ("in") or
// not ("out"): what a reconcile writes, not what the checks say.
func view(servers map[string]haproxytest.Server) map[string]string {
	out := map[string]string{}
	for name, sv := range servers {
		in := "in"
		if sv.Maint() || sv.Drain() || sv.Weight == 0 {
			in = "out"
		}
		out[name] = sv.Address + ":" + strconv.Itoa(sv.Port) + " " + in
	}
	return out
}
