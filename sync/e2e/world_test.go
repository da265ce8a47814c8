package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// shipped is the health check users get: the tests measure what they see.
var shipped = config.ShippedCheck()

// checkInter is the steady check interval of the shipped defaults.
var checkInter = shipped.Inter

// allowedCIDRs is ALLOWED_SERVER_CIDRS for the tests: their Nodes are on
// loopback and their pods in the namespace's 10.244.0.0/16.
const allowedCIDRs = "127.0.0.0/8,10.244.0.0/16,10.245.0.0/16"

var testCIDRs = func() []netip.Prefix {
	var out []netip.Prefix
	for _, c := range strings.Split(allowedCIDRs, ",") {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}()

// world is one test's namespace, HAProxy and sync service.
type world struct {
	t   testing.TB
	ns  string
	ctx context.Context
	h   *haproxytest.HAProxy
	url string
	src *switchSource
	rec *reconcile.Reconciler
}

// switchSource is the world's Kubernetes source; a test may swap it for one
// that fails, to see what the service does when Kubernetes does.
type switchSource struct {
	mu  sync.Mutex
	src reconcile.Source
}

func (s *switchSource) set(src reconcile.Source) { s.mu.Lock(); defer s.mu.Unlock(); s.src = src }

func (s *switchSource) Read(ctx context.Context) (desired.Input, error) {
	s.mu.Lock()
	src := s.src
	s.mu.Unlock()
	return src.Read(ctx)
}

// driverFor makes the HAProxy driver of a world; nil means the runtime driver.
type driverFor func(t testing.TB, h *haproxytest.HAProxy, opts desired.Options) reconcile.Driver

func newWorld(t testing.TB, service string, mode desired.Mode, backends []desired.PortBackend, makeDriver ...driverFor) *world {
	t.Helper()
	return newWorldLines(t, []string{"balance roundrobin", "option tcp-check"}, service, mode, backends, makeDriver...)
}

// newWorldLines is newWorld with the given lines in every backend of
// haproxy.cfg (the check type, say).
func newWorldLines(t testing.TB, lines []string, service string, mode desired.Mode, backends []desired.PortBackend, makeDriver ...driverFor) *world {
	t.Helper()
	return newWorldProxy(t, "", lines, service, mode, backends, makeDriver...)
}

// newWorldProxy is newWorldLines with every backend and its frontend in
// proxyMode ("http"; empty for tcp).
func newWorldProxy(t testing.TB, proxyMode string, lines []string, service string, mode desired.Mode, backends []desired.PortBackend, makeDriver ...driverFor) *world {
	t.Helper()
	w := &world{t: t, ns: strings.ToLower(strings.NewReplacer("/", "-", "=", "-").Replace(t.Name())), ctx: context.Background()}
	// A benchmark may make several worlds: the second is "<name>-2", ...
	for i, base := 2, w.ns; ; i++ {
		_, err := cluster.client.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsAlreadyExists(err) || i > 20 {
			t.Fatal(err)
		}
		w.ns = fmt.Sprintf("%s-%d", base, i)
	}
	var hb []haproxytest.Backend
	for _, b := range backends {
		hb = append(hb, haproxytest.Backend{Name: b.Backend, Lines: lines, Mode: proxyMode})
	}
	w.h = haproxytest.Start(t, hb...)
	opts := desired.Options{
		Mode: mode, Backends: backends,
		Settings: model.Settings{Balance: "roundrobin", TCPCheck: true},
		Check:    shipped,
		// The tests' Nodes are on loopback, their pods in 10.244.0.0/16.
		Addresses: desired.AddressPolicy{Allowed: testCIDRs},
	}
	var drv reconcile.Driver
	if len(makeDriver) > 0 {
		drv = makeDriver[0](t, w.h, opts)
	} else {
		rt, err := runtimeapi.New(w.h.RuntimeURL(), opts.Settings, opts.Check)
		if err != nil {
			t.Fatal(err)
		}
		drv = rt
	}
	w.src = &switchSource{src: &kube.Source{Client: cluster.service, Namespace: w.ns, Service: service, Nodes: mode == desired.NodeMode}}
	rec := &reconcile.Reconciler{
		Source:  w.src,
		Options: opts,
		Targets: []reconcile.Driver{drv},
		Timeout: 5 * time.Second,
	}
	w.rec = rec
	srv := httptest.NewServer(handler.New(handler.Config{Reconciler: rec}))
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// reconcile POSTs /reconcile and returns the status code and result.
func (w *world) reconcile() (int, reconcile.Result) {
	w.t.Helper()
	resp, err := http.Post(w.url+"/reconcile", "", nil)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var res reconcile.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		w.t.Fatal(err)
	}
	return resp.StatusCode, res
}

// mustReconcile expects a 200 and, like serve's follow-up pokes, reconciles
// again while servers wait for their check or sessions (at most 5 s). The
// result is the first one with the lists of every round merged, so a test
// sees what the whole sequence did.
func (w *world) mustReconcile() reconcile.Result {
	w.t.Helper()
	var out reconcile.Result
	deadline := time.Now().Add(5 * time.Second)
	for round := 0; ; round++ {
		code, res := w.reconcile()
		if code != http.StatusOK {
			w.t.Fatalf("reconcile: %d %+v", code, res)
		}
		if round == 0 {
			out = res
		} else {
			merge(&out, res)
		}
		if !res.Pending() || time.Now().After(deadline) {
			for i := range out.Targets {
				out.Targets[i].Waiting, out.Targets[i].Draining = res.Targets[i].Waiting, res.Targets[i].Draining
			}
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// merge adds a later round's changes to out.
func merge(out *reconcile.Result, res reconcile.Result) {
	if res.Status == reconcile.StatusApplied {
		out.Status = reconcile.StatusApplied
	}
	for i := range out.Targets {
		if i >= len(res.Targets) {
			break
		}
		o, r := &out.Targets[i], res.Targets[i]
		for _, l := range []struct {
			to   *[]string
			from []string
		}{
			{&o.Add, r.Add}, {&o.Update, r.Update}, {&o.Drain, r.Drain}, {&o.Maint, r.Maint}, {&o.Delete, r.Delete},
		} {
			*l.to = append(*l.to, l.from...)
			sort.Strings(*l.to)
			*l.to = slices.Compact(*l.to)
		}
		o.Reload = o.Reload || r.Reload
	}
}

// node creates a Node with an InternalIP (status is a subresource).
func (w *world) node(name, ip string) string {
	w.t.Helper()
	name = w.ns + "-" + name // Nodes are cluster-wide; keep tests apart
	n, err := cluster.client.CoreV1().Nodes().Create(w.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	if _, err := cluster.client.CoreV1().Nodes().UpdateStatus(w.ctx, n, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = cluster.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

func (w *world) service(name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	w.t.Helper()
	svc, err := cluster.client.CoreV1().Services(w.ns).Create(w.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Type: typ, Ports: ports, Selector: map[string]string{"app": name}},
	}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return svc
}

// endpoint describes one endpoint of a slice.
type endpoint struct {
	ip, node, pod string
	terminating   bool
	notReady      bool // neither ready nor serving: its server goes to maintenance
}

// slice creates or replaces an EndpointSlice of service, stamped with its
// last-change-trigger-time as the EndpointSlice controller does.
func (w *world) slice(name, service string, ports map[string]int32, eps ...endpoint) {
	w.t.Helper()
	w.sliceAt(name, service, ports, time.Now(), eps...)
}

// sliceAt is slice with the stamp at; a zero at writes none, as a slice
// not made by the EndpointSlice controller has.
func (w *world) sliceAt(name, service string, ports map[string]int32, at time.Time, eps ...endpoint) {
	w.t.Helper()
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if !at.IsZero() {
		sl.Annotations = map[string]string{desired.LastChangeTriggerTime: at.UTC().Format(time.RFC3339Nano)}
	}
	names := make([]string, 0, len(ports))
	for n := range ports {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := ports[n]
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &n, Port: &p})
	}
	for _, e := range eps {
		ready, serving, term := !e.terminating && !e.notReady, !e.notReady, e.terminating
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term}}
		if e.node != "" {
			x.NodeName = &e.node
		}
		if e.pod != "" {
			x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: w.ns, Name: e.pod}
		}
		sl.Endpoints = append(sl.Endpoints, x)
	}
	c := cluster.client.DiscoveryV1().EndpointSlices(w.ns)
	old, err := c.Get(w.ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(w.ctx, sl, metav1.CreateOptions{})
	case err == nil:
		sl.ResourceVersion = old.ResourceVersion
		_, err = c.Update(w.ctx, sl, metav1.UpdateOptions{})
	}
	if err != nil {
		w.t.Fatalf("slice %s: %v", name, err)
	}
}

// server is what a test expects of one HAProxy server.
type server struct {
	addr  string
	port  int
	state string // ready, drain, maint
}

// expectServers checks HAProxy's servers of backend exactly.
func (w *world) expectServers(backend string, want map[string]server) {
	w.t.Helper()
	got := w.h.Servers(w.t, backend)
	if len(got) != len(want) {
		w.t.Fatalf("backend %s: servers %v, want %v", backend, keys(got), want)
	}
	for name, ws := range want {
		g, ok := got[name]
		if !ok {
			w.t.Fatalf("backend %s: no server %s (have %v)", backend, name, keys(got))
		}
		state := "ready"
		switch {
		case g.Maint():
			state = "maint"
		case g.Drain():
			state = "drain"
		}
		if g.Address != ws.addr || g.Port != ws.port || state != ws.state {
			w.t.Errorf("backend %s server %s: %s:%d %s, want %s:%d %s", backend, name, g.Address, g.Port, state, ws.addr, ws.port, ws.state)
		}
		// HAProxy pauses the check of a server in maintenance and resumes it
		// when the server leaves it; every other server must be checked.
		if state != "maint" && !g.CheckRunning() || g.CheckState&0x06 != 0x06 {
			w.t.Errorf("backend %s server %s: health check not running (check state %#x)", backend, name, g.CheckState)
		}
	}
}

// expectTraffic sends connections through backend's frontend until every name
// in want answers and nothing else does (failed connections count as "").
func (w *world) expectTraffic(backend string, want ...string) {
	w.t.Helper()
	wantSet := map[string]bool{}
	for _, n := range want {
		wantSet[n] = true
	}
	var got map[string]int
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got = haproxytest.Spread(w.h.Frontends[backend], 4*max(len(want), 1))
		ok := len(got) == len(wantSet)
		for n := range got {
			ok = ok && wantSet[n]
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.t.Fatalf("traffic through %s: %v, want exactly %v", backend, got, want)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listen(t testing.TB, name, ip string, port int32) *haproxytest.Listener {
	return haproxytest.Listen(t, name, fmt.Sprintf("%s:%d", ip, port))
}
