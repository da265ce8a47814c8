package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sethvargo/go-retry"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// memHAProxy is one HAProxy in memory with several backends; servers are
// UP unless in maintenance. It fails a test's Apply that overlaps another.
type memHAProxy struct {
	name     string
	mu       sync.Mutex
	backends map[string]map[string]model.Server
	reads    map[string]int
	writes   map[string]int
	applying atomic.Int32
	overlap  atomic.Bool
	passes   map[any]int // reads by reconcile.PassOf
}

func newMem(name string, backends ...string) *memHAProxy {
	m := &memHAProxy{name: name, backends: map[string]map[string]model.Server{}, reads: map[string]int{}, writes: map[string]int{}}
	for _, b := range backends {
		m.backends[b] = map[string]model.Server{}
	}
	return m
}

func (m *memHAProxy) Name() string        { return m.name }
func (m *memHAProxy) Policy() plan.Policy { return plan.Policy{} }

func (m *memHAProxy) Read(ctx context.Context, backend string) (model.Backend, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads[backend]++
	if m.passes == nil {
		m.passes = map[any]int{}
	}
	m.passes[reconcile.PassOf(ctx)]++
	servers, ok := m.backends[backend]
	if !ok {
		return model.Backend{}, &failure.BackendError{Backend: backend, Reason: "no such backend"}
	}
	b := model.Backend{Name: backend, Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}}
	for _, s := range servers {
		s.Up = s.State != model.Maint
		b.Servers = append(b.Servers, s)
	}
	sort.Slice(b.Servers, func(i, j int) bool { return b.Servers[i].Name < b.Servers[j].Name })
	return b, nil
}

func (m *memHAProxy) Apply(_ context.Context, p plan.Plan) (plan.Applied, error) {
	if m.applying.Add(1) > 1 {
		m.overlap.Store(true)
	}
	defer m.applying.Add(-1)
	time.Sleep(time.Millisecond) // long enough for an overlap to show
	m.mu.Lock()
	defer m.mu.Unlock()
	var out plan.Applied
	for _, ch := range p.Changes {
		if ch.Action == plan.Delete {
			delete(m.backends[p.Backend], ch.Name)
		} else {
			m.backends[p.Backend][ch.Name] = *ch.New
		}
		m.writes[p.Backend]++
		out.Count(plan.RuntimeWrite)
	}
	return out, nil
}

func (m *memHAProxy) states(backend string) map[string]model.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]model.State{}
	for n, s := range m.backends[backend] {
		out[n] = s.State
	}
	return out
}

// cluster is the Kubernetes side: Services and their slices, listed.
type cluster struct {
	mu      sync.Mutex
	svcs    []corev1.Service
	slices  map[string][]discoveryv1.EndpointSlice
	listErr error
	updates []string
	// dropIPMode is an API server before 1.30: it keeps no ipMode.
	dropIPMode bool
	modes      []string // the ipMode each update sent, "" when unset
}

func (c *cluster) ListServices(_ context.Context, ns string, _ metav1.ListOptions) (*corev1.ServiceList, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listErr != nil {
		return nil, c.listErr
	}
	return &corev1.ServiceList{Items: append([]corev1.Service(nil), c.svcs...)}, nil
}

func (c *cluster) UpdateServiceStatus(_ context.Context, svc *corev1.Service) (*corev1.Service, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent := "" // the ipMode sent
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 && ing[0].IPMode != nil {
		sent = string(*ing[0].IPMode)
	}
	for i := range c.svcs {
		if c.svcs[i].Namespace == svc.Namespace && c.svcs[i].Name == svc.Name {
			c.svcs[i].Status = *svc.Status.DeepCopy()
			if c.dropIPMode {
				for j := range c.svcs[i].Status.LoadBalancer.Ingress {
					c.svcs[i].Status.LoadBalancer.Ingress[j].IPMode = nil
				}
			}
			svc = c.svcs[i].DeepCopy()
		}
	}
	c.updates = append(c.updates, fmt.Sprintf("%s/%s=%v", svc.Namespace, svc.Name, svc.Status.LoadBalancer.Ingress))
	c.modes = append(c.modes, sent)
	return svc, nil
}

type source struct {
	c        *cluster
	ns, name string
}

func (s source) Read(context.Context) (desired.Input, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for i := range s.c.svcs {
		if s.c.svcs[i].Namespace == s.ns && s.c.svcs[i].Name == s.name {
			svc := s.c.svcs[i].DeepCopy()
			return desired.Input{Service: svc, Slices: s.c.slices[s.ns+"/"+s.name]}, nil
		}
	}
	return desired.Input{}, &desired.ServiceNotFoundError{Namespace: s.ns, Name: s.name}
}

func (c *cluster) add(svc corev1.Service, ips ...string) {
	port := svc.Spec.Ports[0].Port
	yes := true
	sl := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &svc.Spec.Ports[0].Name, Port: &port}},
	}
	for _, ip := range ips {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
	}
	c.svcs = append(c.svcs, svc)
	if c.slices == nil {
		c.slices = map[string][]discoveryv1.EndpointSlice{}
	}
	c.slices[svc.Namespace+"/"+svc.Name] = []discoveryv1.EndpointSlice{sl}
}

func annotatedSvc(ns, name, backend string) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{services.Annotation: backend}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}
}

// lbService is a LoadBalancer Service of class "lb" in namespace apps with
// one port.
func lbService(name string, port int32) corev1.Service {
	cls := "lb"
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Port: port}}}}
}

func newFleet(c *cluster, targets ...reconcile.Driver) *Fleet {
	return &Fleet{
		Services:  c,
		Selection: services.Selection{Annotation: true, Class: true, ClassName: "lb", AllowedBackends: []string{"be_*"}},
		Template: &reconcile.Reconciler{
			Options: desired.Options{Mode: desired.PodMode, Settings: model.Settings{Balance: "roundrobin", TCPCheck: true},
				Check:     model.Check{Inter: time.Second, Rise: 1, Fall: 1},
				Addresses: desired.AddressPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}},
			Targets: targets, Timeout: 5 * time.Second, GuardPercent: 100,
			Backoff: func() retry.Backoff { return retry.NewConstant(5 * time.Millisecond) },
		},
		Source: func(ns, name string) reconcile.Source { return source{c, ns, name} },
		Status: c, VIPs: []string{"127.0.0.10"},
	}
}

func TestFleetReconcilesEachServiceAndNeverOverlapsWrites(t *testing.T) {
	c := &cluster{}
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("be_%02d", i))
		c.add(annotatedSvc("apps", fmt.Sprintf("web%02d", i), names[i]), fmt.Sprintf("127.0.1.%d", i+1), fmt.Sprintf("127.0.2.%d", i+1))
	}
	h1, h2 := newMem("h1", names...), newMem("h2", names...)
	f := newFleet(c, h1, h2)
	res, err := f.Reconcile(context.Background(), false)
	if err != nil || res.Status != reconcile.StatusApplied || len(res.Services) != 12 {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	for _, h := range []*memHAProxy{h1, h2} {
		if h.overlap.Load() {
			t.Fatalf("%s: two Services applied at once", h.name)
		}
		for _, b := range names {
			if n := len(h.states(b)); n != 2 {
				t.Fatalf("%s %s has %d servers, want 2", h.name, b, n)
			}
		}
	}
	res, err = f.Reconcile(context.Background(), false)
	if err != nil || res.Status != reconcile.StatusUnchanged {
		t.Fatalf("second reconcile: %v %s, want unchanged", err, res.Status)
	}
}

func TestFleetListFailureChangesNothing(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	h := newMem("h", "be_web")
	f := newFleet(c, h)
	c.listErr = errors.New("connection refused")
	res, err := f.Reconcile(context.Background(), false)
	if err == nil || res.Status != reconcile.StatusError || len(res.Services) != 0 || h.reads["be_web"] != 0 {
		t.Fatalf("a failed list: %v %+v, reads %v; want an error and nothing read", err, res, h.reads)
	}
}

// TestOneBadServiceFailsNotTheReconcile (issue 54 row 6): a Service naming
// a backend haproxy.cfg lacks fails for its own reason; it is listed, and
// the full reconcile succeeds for the others (200, not 503 "services
// failed: 1 of 3").
func TestOneBadServiceFailsNotTheReconcile(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	c.add(annotatedSvc("apps", "api", "be_api"), "127.0.1.3")
	c.add(annotatedSvc("apps", "broken", "be_missing"), "127.0.1.2")
	h := newMem("h", "be_web", "be_api")
	res, err := newFleet(c, h).Reconcile(context.Background(), false)
	if err != nil {
		t.Fatalf("err = %v: one Service's own failure failed the instance's reconcile", err)
	}
	got := map[string]string{}
	for _, s := range res.Services {
		got[s.Service] = s.Status
		if s.Service == "apps/broken" && s.ErrorClass != failure.Permanent {
			t.Errorf("apps/broken's class %q, want permanent", s.ErrorClass)
		}
	}
	if got["apps/web"] != reconcile.StatusApplied || got["apps/api"] != reconcile.StatusApplied || got["apps/broken"] != reconcile.StatusError {
		t.Fatalf("statuses %v, want the bad one listed as failed", got)
	}
	if res.Status != reconcile.StatusApplied || res.ErrorClass != "" || res.Error != "" {
		t.Fatalf("result %s %q %q, want applied", res.Status, res.ErrorClass, res.Error)
	}
}

// TestSummarize: only a failure a retry can mend fails the instance's
// reconcile; the others are listed.
func TestSummarize(t *testing.T) {
	ok := reconcile.Result{Status: reconcile.StatusUnchanged}
	applied := reconcile.Result{Status: reconcile.StatusApplied}
	bad := func(c failure.Class) reconcile.Result {
		return reconcile.Result{Status: reconcile.StatusError, ErrorClass: c}
	}
	tests := []struct {
		name     string
		services []reconcile.Result
		left     []reconcile.Result
		fails    bool
		status   string
		class    failure.Class
		full     bool // a full reconcile's (speaks for the instance)
	}{
		{"all well", []reconcile.Result{ok, applied}, nil, false, reconcile.StatusApplied, "", false},
		{"one permanent (its own)", []reconcile.Result{ok, bad(failure.Permanent), ok}, nil, false, reconcile.StatusUnchanged, "", false},
		{"every one permanent: the instance's, not theirs", []reconcile.Result{bad(failure.Permanent), bad(failure.Permanent)}, nil, true, reconcile.StatusUnchanged, failure.Permanent, true},
		{"every one of a batch permanent: theirs (a CloudEvent's batch)", []reconcile.Result{bad(failure.Permanent), bad(failure.Permanent)}, nil, false, reconcile.StatusUnchanged, "", false},
		{"every one but one permanent", []reconcile.Result{bad(failure.Permanent), ok}, nil, false, reconcile.StatusUnchanged, "", false},
		{"one alone permanent (a lane's Service: its own)", []reconcile.Result{bad(failure.Permanent)}, nil, false, reconcile.StatusUnchanged, "", false},
		{"one temporary", []reconcile.Result{ok, bad(failure.Temporary), bad(failure.Permanent)}, nil, true, reconcile.StatusUnchanged, failure.Temporary, false},
		{"one unreachable", []reconcile.Result{bad(failure.Unreachable), bad(failure.Temporary)}, nil, true, reconcile.StatusUnchanged, failure.Unreachable, false},
		{"a class unknown is mended by a retry", []reconcile.Result{bad("")}, nil, true, reconcile.StatusUnchanged, failure.Temporary, false},
		{"a left backend unreachable", []reconcile.Result{applied}, []reconcile.Result{bad(failure.Unreachable)}, true, reconcile.StatusApplied, failure.Unreachable, false},
		{"a left backend gone from haproxy.cfg", []reconcile.Result{ok}, []reconcile.Result{bad(failure.Permanent)}, false, reconcile.StatusUnchanged, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res Result
			for i, r := range tt.services {
				res.Services = append(res.Services, ServiceResult{Service: fmt.Sprint("a/s", i), Result: r})
			}
			for i, r := range tt.left {
				res.Left = append(res.Left, LeftResult{Backend: fmt.Sprint("be_", i), Result: r})
			}
			err := summarize(&res, false, tt.full)
			if (err != nil) != tt.fails || (err != nil) != errors.Is(err, ErrServices) {
				t.Fatalf("err = %v, want failed %v", err, tt.fails)
			}
			if res.Status != tt.status || res.ErrorClass != tt.class {
				t.Fatalf("status %s class %q, want %s %q", res.Status, res.ErrorClass, tt.status, tt.class)
			}
		})
	}
}

func TestMendable(t *testing.T) {
	for c, want := range map[failure.Class]bool{failure.Temporary: true, failure.Unreachable: true, failure.Permanent: false, "": true} {
		if got := Mendable(c); got != want {
			t.Errorf("Mendable(%q) = %v, want %v", c, got, want)
		}
	}
}

func TestReconcileServiceTouchesOnlyItsBackends(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "a", "be_a"), "127.0.1.1")
	c.add(annotatedSvc("apps", "b", "be_b"), "127.0.1.2")
	h := newMem("h", "be_a", "be_b")
	f := newFleet(c, h)
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	before := h.reads["be_b"]
	res, err := f.ReconcileService(context.Background(), "apps/a", false)
	if err != nil || len(res.Services) != 1 || res.Services[0].Service != "apps/a" {
		t.Fatalf("%v %+v", err, res)
	}
	if h.reads["be_b"] != before {
		t.Fatalf("be_b read %d more times by apps/a's reconcile", h.reads["be_b"]-before)
	}
	var nse *NotSelectedError
	if _, err := f.ReconcileService(context.Background(), "apps/nope", false); !errors.As(err, &nse) {
		t.Fatalf("a Service not selected: %v", err)
	}
}

// fakeFrontends says which class Services are ready and which failed, and
// which owned backends drain.
type fakeFrontends struct {
	report services.FrontendReport
	err    error
	got    []string
}

func (f *fakeFrontends) Sync(_ context.Context, want []services.Selected, _ map[string]string) (services.FrontendReport, error) {
	f.got = nil
	for _, s := range want {
		f.got = append(f.got, s.Key())
	}
	return f.report, f.err
}

func TestClassServicesFrontendsStatusAndDraining(t *testing.T) {
	c := &cluster{}
	cls := "lb"
	lbSvc := func(name string, port int32) corev1.Service {
		return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Name: "http", Port: port}}}}
	}
	c.add(lbSvc("good", 80), "127.0.1.1")
	c.add(lbSvc("bad", 81), "127.0.1.2")
	c.add(annotatedSvc("apps", "plain", "be_plain"), "127.0.1.3")
	_, beGood := services.ClassNames("", "apps", "good", 80)
	_, beBad := services.ClassNames("", "apps", "bad", 81)
	_, beOld := services.ClassNames("", "apps", "old", 82)
	h := newMem("h", beGood, beBad, beOld, "be_plain")
	h.backends[beOld]["old-1"] = model.Server{Name: "old-1", Address: "127.0.3.1", Port: 80, State: model.Ready, Weight: 1}
	fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/good": true},
		Failed: map[string]string{"apps/bad": "bind refused"}, Draining: []string{beOld}}}
	f := newFleet(c, h)
	f.Frontends = fe
	res, err := f.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatalf("err = %v: apps/bad's frontend failure is its own, listed", err)
	}
	if fmt.Sprint(fe.got) != "[apps/bad apps/good]" {
		t.Fatalf("frontends asked for %v, want the class Services", fe.got)
	}
	by := map[string]ServiceResult{}
	for _, s := range res.Services {
		by[s.Service] = s
	}
	if by["apps/bad"].Status != reconcile.StatusError || h.reads[beBad] != 0 {
		t.Fatalf("apps/bad: %+v, reads %d: a Service whose frontends failed is not reconciled", by["apps/bad"], h.reads[beBad])
	}
	if by["apps/good"].Ingress != IngressWritten || by["apps/plain"].Ingress != "" {
		t.Fatalf("ingress: good %q plain %q", by["apps/good"].Ingress, by["apps/plain"].Ingress)
	}
	if st := h.states(beOld); st["old-1"] != model.Maint || len(res.Left) != 1 {
		t.Fatalf("draining backend: %v, left %+v; want its server parked, not deleted", st, res.Left)
	}
	n := len(c.updates)
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if len(c.updates) != n {
		t.Fatalf("status written again though unchanged: %v", c.updates)
	}
	// apps/good leaves the class: its status (ours) is withdrawn.
	c.mu.Lock()
	c.svcs[0].Spec.LoadBalancerClass = nil
	c.mu.Unlock()
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if last := c.updates[len(c.updates)-1]; last != "apps/good=[]" {
		t.Fatalf("updates %v: want apps/good's withdrawn", c.updates)
	}
}

func TestReconcileLeftParksOnlyBackendsNoServiceNames(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	h := newMem("h", "be_web", "be_gone")
	h.backends["be_gone"]["old-1"] = model.Server{Name: "old-1", Address: "127.0.3.1", Port: 80, State: model.Ready, Weight: 1}
	f := newFleet(c, h)
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	webBefore := h.states("be_web")
	res, err := f.ReconcileLeft(context.Background(), []string{"be_gone", "be_web", "be_gone"})
	if err != nil || len(res.Left) != 1 || res.Left[0].Backend != "be_gone" || len(res.Services) != 1 || res.Services[0].Service != "apps/web" {
		t.Fatalf("%v %+v: want be_gone parked and be_web's Service reconciled (it still names it)", err, res)
	}
	if w := res.Left[0].Warnings; len(w) != 0 {
		t.Errorf("a left backend warns %+v: no Service is misconfigured", w)
	}
	if st := h.states("be_gone"); st["old-1"] != model.Maint {
		t.Fatalf("be_gone: %v, want old-1 parked, not deleted on one read", st)
	}
	if fmt.Sprint(h.states("be_web")) != fmt.Sprint(webBefore) {
		t.Fatalf("be_web changed: %v → %v", webBefore, h.states("be_web"))
	}
	c.listErr = errors.New("timeout")
	if _, err := f.ReconcileLeft(context.Background(), []string{"be_web"}); err == nil {
		t.Fatal("a failed list must fail a left reconcile: the backend may be named again")
	}
}

// TestLeftBackendStillNamedReconcilesItsService: a claim of be_web by a
// second Service goes, and the watch hands be_web over as left: the Service
// that still names it is reconciled, never its backend parked.
func TestLeftBackendStillNamedReconcilesItsService(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	h := newMem("h", "be_web")
	f := newFleet(c, h)
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.add(annotatedSvc("apps", "claim", "be_web"))
	if res, _ := f.ReconcileService(context.Background(), "apps/claim", false); len(res.Services) != 0 {
		t.Fatalf("a refused Service was reconciled: %+v", res)
	}
	c.mu.Lock()
	c.svcs = nil
	c.mu.Unlock()
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1", "127.0.1.2") // a new pod; the claim is deleted
	res, err := f.ReconcileLeft(context.Background(), []string{"be_web"})
	if err != nil || len(res.Services) != 1 || len(res.Left) != 0 {
		t.Fatalf("%v %+v: want apps/web reconciled, be_web not parked", err, res)
	}
	if n := len(h.states("be_web")); n != 2 {
		t.Fatalf("be_web: %v, want both pods' servers", h.states("be_web"))
	}
}

// TestHolderKeepsItsBackend (issue 54 row 5): a Service that serves be_web
// keeps it when an older Service names it too: the claimant is refused
// with an Event naming the holder, and the holder's endpoint changes still
// reach HAProxy; once the claim goes, nothing changes.
func TestHolderKeepsItsBackend(t *testing.T) {
	c := &cluster{}
	web := annotatedSvc("apps", "web", "be_web")
	web.CreationTimestamp = metav1.NewTime(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	c.add(web, "127.0.1.1")
	h := newMem("h", "be_web")
	f := newFleet(c, h)
	w := &told{}
	f.Warn = w.warn
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	thief := annotatedSvc("other", "thief", "be_web")
	thief.CreationTimestamp = metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) // older, annotated later
	c.add(thief, "127.0.9.9")
	c.mu.Lock()
	c.slices["apps/web"][0].Endpoints = append(c.slices["apps/web"][0].Endpoints, c.slices["apps/web"][0].Endpoints[0])
	c.slices["apps/web"][0].Endpoints[1].Addresses = []string{"127.0.1.2"} // the holder scales up meanwhile
	c.mu.Unlock()
	for _, run := range []func() (Result, error){
		func() (Result, error) { return f.Reconcile(context.Background(), false) },
		func() (Result, error) { return f.ReconcileService(context.Background(), "apps/web", false) },
	} {
		res, err := run()
		if err != nil || len(res.Services) != 1 || res.Services[0].Service != "apps/web" || res.Services[0].Status == reconcile.StatusError {
			t.Fatalf("%v %+v: want apps/web followed", err, res.Services)
		}
		if len(res.Refused) != 1 || res.Refused[0].Service != "other/thief" || res.Refused[0].Holder != "apps/web" {
			t.Fatalf("refused %+v: want other/thief refused, naming apps/web", res.Refused)
		}
	}
	st := h.states("be_web")
	if len(st) != 2 || st["127-0-1-1"] != model.Ready || st["127-0-1-2"] != model.Ready {
		t.Fatalf("be_web %v: want the holder's two pods, no claimant's", st)
	}
	if got := w.take(); len(got) != 1 || !strings.HasPrefix(got[0], "other/thief") || !strings.Contains(got[0], "held by apps/web") {
		t.Fatalf("told %q: want one Event on the claimant naming the holder", got)
	}
}

// TestClassServiceWaitsForReload: a class Service whose frontends HAProxy
// does not run yet (Loading) is not reconciled (its backend is unknown to
// the socket until the reload), fails nothing, gets no status, and asks for
// a follow-up.
func TestClassServiceWaitsForReload(t *testing.T) {
	c := &cluster{}
	c.add(lbService("new", 80), "127.0.1.1")
	_, be := services.ClassNames("", "apps", "new", 80)
	h := newMem("h", be)
	fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/new": true}, Loading: []string{"apps/new"}}}
	f := newFleet(c, h)
	f.Frontends = fe
	res, err := f.Reconcile(context.Background(), false)
	if err != nil || len(res.Services) != 1 {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	s := res.Services[0]
	if s.Loading == "" || !s.Pending() || s.Ingress != "" || h.reads[be] != 0 || len(c.updates) != 0 {
		t.Fatalf("loading Service: %+v, reads %d, status writes %d; want it waiting, unread, no status", s, h.reads[be], len(c.updates))
	}
	fe.report.Loading = nil
	if res, err = f.Reconcile(context.Background(), false); err != nil || res.Services[0].Loading != "" || h.reads[be] == 0 {
		t.Fatalf("after the reload: %v %+v, reads %d; want it reconciled", err, res.Services, h.reads[be])
	}
}

// TestFrontendsUnreadableKeepStatus: a target that cannot be read fails the
// class Services' reconcile, but withdraws no status and tells no Event:
// their frontends may well be there, and external-dns must not churn on one
// failed read.
func TestFrontendsUnreadableKeepStatus(t *testing.T) {
	c := &cluster{}
	cls := "lb"
	svc := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Port: 80}}}}
	c.add(svc, "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	h := newMem("h", be)
	fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/web": true}}}
	f := newFleet(c, h)
	f.Frontends = fe
	w := &told{}
	f.Warn = w.warn
	if _, err := f.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if len(c.updates) != 1 {
		t.Fatalf("status updates %v, want the address written", c.updates)
	}
	fe.report, fe.err = services.FrontendReport{Ready: map[string]bool{}}, fmt.Errorf("target http://127.0.0.1:1: read frontends: %w", &failure.NetworkError{Err: syscall.ECONNREFUSED})
	res, err := f.Reconcile(context.Background(), false)
	if !errors.Is(err, ErrServices) || res.Services[0].Status != reconcile.StatusError {
		t.Fatalf("unreadable target: %v %+v, want apps/web failed", err, res.Services)
	}
	if len(c.updates) != 1 || len(w.take()) != 0 {
		t.Fatalf("status updates %v: want none more (no withdrawal), and no Event", c.updates)
	}
}

// downHAProxy is a target nothing listens at.
type downHAProxy struct{ name string }

func (d downHAProxy) Name() string        { return d.name }
func (d downHAProxy) Policy() plan.Policy { return plan.Policy{} }
func (d downHAProxy) Read(context.Context, string) (model.Backend, error) {
	return model.Backend{}, &failure.NetworkError{Err: syscall.ECONNREFUSED}
}
func (d downHAProxy) Apply(context.Context, plan.Plan) (plan.Applied, error) {
	return plan.Applied{}, &failure.NetworkError{Err: syscall.ECONNREFUSED}
}

// TestOneHAProxyDownHoldsBackNoClassService (issue 54 row 1): one HAProxy of
// a pair cannot be read; a class Service is still reconciled on the other
// (a rollout there must not take it down), fails this reconcile as
// unreachable (503: a retry mends it), and its status is neither written
// nor withdrawn.
func TestOneHAProxyDownHoldsBackNoClassService(t *testing.T) {
	c := &cluster{}
	c.add(lbService("web", 80), "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	live := newMem("a", be)
	fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/web": false}},
		err: fmt.Errorf("target b: read frontends: %w", &failure.NetworkError{Err: syscall.ECONNREFUSED})}
	f := newFleet(c, live, downHAProxy{"b"})
	f.Frontends = fe
	res, err := f.Reconcile(context.Background(), false)
	if st := live.states(be); len(st) != 1 {
		t.Fatalf("%s on the live HAProxy: %v, want the pod's server: one HAProxy down froze the Service on the other", be, st)
	}
	if !errors.Is(err, ErrServices) || res.ErrorClass != failure.Unreachable {
		t.Fatalf("err %v class %q: want the down target's failure, unreachable (503)", err, res.ErrorClass)
	}
	if s := res.Services[0]; s.Status != reconcile.StatusError || s.Ingress != "" || len(c.updates) != 0 {
		t.Fatalf("apps/web: %+v, status writes %v; want failed, its status untouched", s, c.updates)
	}
}

// TestOneHAProxyDownHidesNotBehindAServicesOwnFailure (a second reader):
// a class Service whose frontend an operator's holds on the HAProxy read
// (its own, permanent failure) while the other HAProxy cannot be read: the
// unread target is not hidden behind the Service's own failure: 503,
// unreachable, as without it.
func TestOneHAProxyDownHidesNotBehindAServicesOwnFailure(t *testing.T) {
	c := &cluster{}
	c.add(lbService("web", 80), "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	live := newMem("a", be)
	fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{"apps/web": false},
		Failed: map[string]string{"apps/web": "an operator's frontend binds 127.0.1.1:80"}, FailedClass: map[string]failure.Class{"apps/web": failure.Permanent}},
		err: fmt.Errorf("target b: read frontends: %w", &failure.NetworkError{Err: syscall.ECONNREFUSED})}
	f := newFleet(c, live, downHAProxy{"b"})
	f.Frontends = fe
	res, err := f.Reconcile(context.Background(), false)
	if !errors.Is(err, ErrServices) || res.ErrorClass != failure.Unreachable {
		t.Fatalf("err %v class %q: want the down target's failure, unreachable (503), not hidden behind the Service's own", err, res.ErrorClass)
	}
}

func TestUnsure(t *testing.T) {
	refused := fmt.Errorf("target b: %w", &failure.NetworkError{Err: syscall.ECONNREFUSED})
	hung := fmt.Errorf("target b: %w", context.DeadlineExceeded)
	tests := []struct {
		name   string
		r      reconcile.Result
		unread error
		error  string
		class  failure.Class
	}{
		{"applied on the live target", reconcile.Result{Status: reconcile.StatusApplied}, refused, "frontends: target b: connection refused", failure.Unreachable},
		{"its own failure there too", reconcile.Result{Status: reconcile.StatusError, Error: "target b: connection refused", ErrorClass: failure.Unreachable}, refused,
			"frontends: target b: connection refused; target b: connection refused", failure.Unreachable},
		{"a hung target", reconcile.Result{Status: reconcile.StatusUnchanged}, hung, "frontends: target b: context deadline exceeded", failure.Temporary},
	}
	for _, tt := range tests {
		got := unsure(tt.r, tt.unread)
		if got.Status != reconcile.StatusError || got.Error != tt.error || got.ErrorClass != tt.class {
			t.Errorf("%s: %s %q %q, want error %q %q", tt.name, got.Status, got.Error, got.ErrorClass, tt.error, tt.class)
		}
	}
}
