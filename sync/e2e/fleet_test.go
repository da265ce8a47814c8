package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// counting wraps a driver and counts its reads and applies per backend.
type counting struct {
	reconcile.Driver
	mu             sync.Mutex
	reads, applies map[string]int
	bulk           int // ReadAll calls
}

// ReadAll is the driver's, counted (a full reconcile's one read of all).
func (c *counting) ReadAll(ctx context.Context) (map[string]model.Backend, error) {
	br, ok := reconcile.BulkOf(c.Driver)
	if !ok {
		return nil, errors.New("this driver reads its backends one by one")
	}
	c.mu.Lock()
	c.bulk++
	c.mu.Unlock()
	return br.ReadAll(ctx)
}

// bulkReads returns the ReadAll calls since the last, and resets.
func (c *counting) bulkReads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.bulk
	c.bulk = 0
	return n
}

func newCounting(d reconcile.Driver) *counting {
	return &counting{Driver: d, reads: map[string]int{}, applies: map[string]int{}}
}

func (c *counting) Read(ctx context.Context, backend string) (model.Backend, error) {
	c.mu.Lock()
	c.reads[backend]++
	c.mu.Unlock()
	return c.Driver.Read(ctx, backend)
}

func (c *counting) Apply(ctx context.Context, p plan.Plan) (plan.Applied, error) {
	c.mu.Lock()
	c.applies[p.Backend]++
	c.mu.Unlock()
	return c.Driver.Apply(ctx, p)
}

// touched returns the backends read or written since the last reset, and
// resets.
func (c *counting) touched() (read, written []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	read, written = keys(c.reads), keys(c.applies)
	c.reads, c.applies = map[string]int{}, map[string]int{}
	return read, written
}

// fleetWorld is a namespace, an HAProxy with the given backends and a fleet
// over them (the runtime driver), selecting annotated Services with
// ANNOTATION_BACKENDS=be_*.
type fleetWorld struct {
	t    testing.TB
	ns   string
	h    *haproxytest.HAProxy
	drv  *counting
	f    *fleet.Fleet
	http string
	// api is the test Data Plane API, when the driver is the Data Plane
	// one.
	api *dataplanetest.Server
}

func newFleetWorld(t testing.TB, backends ...string) *fleetWorld {
	t.Helper()
	return newFleetWorldOf(t, false, backends...)
}

// newFleetWorldOf is newFleetWorld with, when dataplane is set, the Data
// Plane driver over the test API (and the socket beside it) instead.
func newFleetWorldOf(t testing.TB, dataplaneAPI bool, backends ...string) *fleetWorld {
	t.Helper()
	w := newWorld(t, "unused", desired.PodMode, nil) // the namespace and its clean-up
	fw := &fleetWorld{t: t, ns: w.ns}
	var hb []haproxytest.Backend
	for _, b := range backends {
		hb = append(hb, haproxytest.Backend{Name: b, Lines: []string{"balance roundrobin", "option tcp-check"}})
	}
	fw.h = haproxytest.Start(t, hb...)
	opts := desired.Options{Mode: desired.PodMode, Settings: model.Settings{Balance: "roundrobin", TCPCheck: true},
		Check: shipped, Addresses: desired.AddressPolicy{Allowed: testCIDRs}}
	rt, err := runtimeapi.New(fw.h.RuntimeURL(), opts.Settings, opts.Check)
	if err != nil {
		t.Fatal(err)
	}
	fw.drv = newCounting(rt)
	if dataplaneAPI {
		api := dataplanetest.Over(t, fw.h, dataplanetest.Options{}, nil, backends...)
		fw.api = api
		rr := "roundrobin"
		for _, b := range backends {
			api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: b, Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
		}
		u, err := url.Parse(api.URL)
		if err != nil {
			t.Fatal(err)
		}
		fw.drv = newCounting(dataplane.New(u, dataplane.Auth{}, &http.Client{Timeout: 10 * time.Second}, dataplane.WithRuntime(rt)))
	}
	fw.f = &fleet.Fleet{
		Services:  cluster.service,
		Selection: services.Selection{Annotation: true, Namespaces: []string{fw.ns}, AllowedBackends: []string{"be_*"}},
		Template:  &reconcile.Reconciler{Options: opts, Targets: []reconcile.Driver{fw.drv}, Timeout: 10 * time.Second, GuardPercent: 100},
		Source: func(ns, name string) reconcile.Source {
			return &kube.Source{Client: cluster.service, Namespace: ns, Service: name}
		},
	}
	srv := httptest.NewServer(handler.New(handler.Config{Fleet: fw.f}))
	t.Cleanup(srv.Close)
	fw.http = srv.URL
	return fw
}

// annotated creates a Service with one port "http" annotated with value;
// headless: the test API server's Service address range holds 256.
func (fw *fleetWorld) annotated(name, value string) {
	fw.t.Helper()
	_, err := quietClient(fw.t).CoreV1().Services(fw.ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{services.Annotation: value}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
			Selector: map[string]string{"app": name}},
	}, metav1.CreateOptions{})
	if err != nil {
		fw.t.Fatal(err)
	}
}

// quietClient is the cluster's client without the API server's warnings
// (headless Services draw one each about session affinity).
var quietClient = func() func(testing.TB) kubernetes.Interface {
	var once sync.Once
	var c kubernetes.Interface
	return func(t testing.TB) kubernetes.Interface {
		once.Do(func() {
			cfg := rest.CopyConfig(cluster.cfg)
			cfg.WarningHandler = rest.NoWarnings{}
			var err error
			if c, err = kubernetes.NewForConfig(cfg); err != nil {
				t.Fatal(err)
			}
		})
		return c
	}
}()

// post POSTs /reconcile (with query) and decodes the many-Services result.
func (fw *fleetWorld) post(query string) (int, fleet.Result) {
	fw.t.Helper()
	resp, err := http.Post(fw.http+"/reconcile"+query, "", nil)
	if err != nil {
		fw.t.Fatal(err)
	}
	defer resp.Body.Close()
	var res fleet.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		fw.t.Fatal(err)
	}
	return resp.StatusCode, res
}

// settle reconciles (through run) until no selected Service has servers
// waiting for their check, as serve's follow-up does; at most 15 s.
func settle(t testing.TB, run func() fleet.Result) fleet.Result {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res := run()
		pending := false
		for _, s := range res.Services {
			pending = pending || s.Pending()
		}
		if !pending || time.Now().After(deadline) {
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFleet50AnnotatedServices: 50 annotated Services converge from nothing
// on a real kube-apiserver and HAProxy, with traffic through their
// frontends; a backend two Services name goes to one, the other refused; a Service
// whose backend HAProxy lacks fails alone; an endpoint change in one
// Service reconciled with ?service= reads and writes its backend alone.
func TestFleet50AnnotatedServices(t *testing.T) {
	const n = 50
	var backends []string
	for i := range n {
		backends = append(backends, fmt.Sprintf("be_%02d", i))
	}
	fw := newFleetWorld(t, append(backends, "be_dup")...)
	for i := range n {
		svc := fmt.Sprintf("web%02d", i)
		port := int32(21000 + i)
		fw.annotated(svc, "http="+backends[i])
		(&world{t: t, ns: fw.ns, ctx: context.Background()}).slice(svc+"-1", svc, map[string]int32{"http": port},
			endpoint{ip: "10.244.0.1", pod: svc + "-a"}, endpoint{ip: "10.244.0.2", pod: svc + "-b"})
		listen(t, svc+"-a", "10.244.0.1", port)
		listen(t, svc+"-b", "10.244.0.2", port)
	}
	fw.annotated("dup-a", "be_dup")
	fw.annotated("dup-b", "be_dup")
	fw.annotated("broken", "be_absent")

	start := time.Now()
	res := settle(t, func() fleet.Result {
		res, err := fw.f.Reconcile(context.Background(), false)
		if err != nil {
			t.Fatalf("reconcile: %v, want broken's own failure listed, not the reconcile's", err)
		}
		return res
	})
	t.Logf("%d Services converged in %s", n, time.Since(start).Round(time.Millisecond))
	if len(res.Services) != n+2 {
		t.Fatalf("%d Services reconciled, want %d, broken and dup-a", len(res.Services), n)
	}
	for _, s := range res.Services {
		switch {
		case s.Service == fw.ns+"/broken":
			if s.Status != reconcile.StatusError || len(s.Targets) != 1 || s.Targets[0].Backend != "be_absent" || s.Targets[0].Error == "" {
				t.Fatalf("broken: %s %+v, want be_absent's failure", s.Status, s.Targets)
			}
		case s.Status == reconcile.StatusError:
			t.Fatalf("%s failed: %s (broken must hold back no other)", s.Service, s.Error)
		}
	}
	refused := map[string]string{}
	for _, r := range res.Refused {
		refused[r.Service] = r.Holder
	}
	// Neither held be_dup: the older (then by name), dup-a, gets it.
	if len(refused) != 1 || refused[fw.ns+"/dup-b"] != fw.ns+"/dup-a" {
		t.Fatalf("refused = %+v, want dup-b alone, naming dup-a", res.Refused)
	}
	if got := fw.h.Servers(t, "be_dup"); len(got) != 0 {
		t.Fatalf("be_dup has servers %v: dup-a has no endpoint, dup-b's must not be there", keys(got))
	}
	// The servers state of every backend, then traffic through a few.
	for i, b := range backends {
		svc := fmt.Sprintf("web%02d", i)
		got := fw.h.Servers(t, b)
		if len(got) != 2 {
			t.Fatalf("%s: servers %v, want %s-a and %s-b", b, keys(got), svc, svc)
		}
		for name, s := range got {
			if s.Maint() || s.Drain() || !s.Up() || s.Port != 21000+i {
				t.Fatalf("%s server %s: %s:%d admin %#x op %d, want UP in service on port %d", b, name, s.Address, s.Port, s.Admin, s.Op, 21000+i)
			}
		}
	}
	for _, i := range []int{0, 17, 49} {
		svc := fmt.Sprintf("web%02d", i)
		expectSpread(t, fw.h.Frontends[backends[i]], svc+"-a", svc+"-b")
	}

	// One Service's endpoints change: ?service= reads and writes its
	// backend alone.
	fw.drv.touched()
	(&world{t: t, ns: fw.ns, ctx: context.Background()}).slice("web07-1", "web07", map[string]int32{"http": 21007},
		endpoint{ip: "10.244.0.3", pod: "web07-c"})
	listen(t, "web07-c", "10.244.0.3", 21007)
	settle(t, func() fleet.Result {
		code, res := fw.post("?service=" + fw.ns + "/web07")
		if code != http.StatusOK || len(res.Services) != 1 || res.Services[0].Service != fw.ns+"/web07" {
			t.Fatalf("?service=%s/web07: %d %+v", fw.ns, code, res)
		}
		return res
	})
	read, written := fw.drv.touched()
	if strings.Join(read, ",") != "be_07" || strings.Join(written, ",") != "be_07" {
		t.Fatalf("?service= read %v and wrote %v, want be_07 alone", read, written)
	}
	expectSpread(t, fw.h.Frontends["be_07"], "web07-c")
	if code, _ := fw.post("?service=" + fw.ns + "/dup-b"); code != http.StatusNotFound {
		t.Fatalf("?service= a refused Service: %d, want 404", code)
	}
}

// expectSpread sends connections to addr until exactly want answer.
func expectSpread(t testing.TB, addr string, want ...string) {
	t.Helper()
	var got map[string]int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = haproxytest.Spread(addr, 4*len(want))
		ok := len(got) == len(want)
		for _, n := range want {
			ok = ok && got[n] > 0
		}
		if ok {
			return
		}
	}
	t.Fatalf("traffic through %s: %v, want exactly %v", addr, got, want)
}
