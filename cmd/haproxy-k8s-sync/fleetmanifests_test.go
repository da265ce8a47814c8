package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// svcDoc is one Service of a test's manifests in pod mode: its EndpointSlice
// holds a ready pod at each of addrs (host:port, one port for all: the
// slice's).
type svcDoc struct {
	namespace, name, annotation, created string
	class                                string // spec.loadBalancerClass: a LoadBalancer Service
	addrs                                []string
}

// manifestsOf writes the Services and their slices as YAML documents.
func manifestsOf(t *testing.T, path string, svcs ...svcDoc) {
	t.Helper()
	var b strings.Builder
	for _, s := range svcs {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\n", s.name, s.namespace)
		if s.created != "" {
			fmt.Fprintf(&b, "  creationTimestamp: %q\n", s.created)
		}
		if s.annotation != "" {
			fmt.Fprintf(&b, "  annotations: {haproxy-k8s-sync.io/backends: %q}\n", s.annotation)
		}
		if s.class != "" {
			fmt.Fprintf(&b, "spec:\n  type: LoadBalancer\n  loadBalancerClass: %s\n  ports:\n  - {name: http, port: 80}\n  - {name: https, port: 443}\n  - {name: dns, port: 53, protocol: UDP}\n", s.class)
		} else {
			b.WriteString("spec:\n  ports: [{name: http, port: 80}]\n")
		}
		if len(s.addrs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-1\n  namespace: %s\n  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\n", s.name, s.namespace, s.name)
		_, port, _ := strings.Cut(s.addrs[0], ":")
		fmt.Fprintf(&b, "ports: [{name: http, port: %s}, {name: https, port: %s}]\nendpoints:\n", port, port)
		for _, a := range s.addrs {
			ip, _, _ := strings.Cut(a, ":")
			fmt.Fprintf(&b, "- {addresses: [%s], conditions: {ready: true}}\n", ip)
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// annotatedShop is two annotated Services and a third that names the first
// one's backend, younger: refused, the first holding it.
func annotatedShop(web, api []string) []svcDoc {
	return []svcDoc{
		{namespace: "shop", name: "web", annotation: "be_web", created: "2026-01-01T00:00:00Z", addrs: web},
		{namespace: "shop", name: "api", annotation: "be_api", created: "2026-01-02T00:00:00Z", addrs: api},
		{namespace: "shop", name: "web-canary", annotation: "be_web", created: "2026-01-03T00:00:00Z", addrs: []string{"127.0.0.69:8080"}},
		{namespace: "shop", name: "plain", addrs: []string{"127.0.0.70:8080"}}, // not annotated: not selected
	}
}

// fleetAnswer is what the tests read of a many-Services result.
type fleetAnswer struct {
	Status   string
	Services []struct {
		Service string
		Status  string
		Targets []struct {
			Target, Backend string
			Add             []string
		}
	}
	Refused      []struct{ Service, Reason, Holder string }
	FrontendPlan []frontendStep
}

// TestManyServicesDryRunFromManifests (issue 54 row 9): `reconcile
// --dry-run --manifests` in annotation mode needs neither cluster nor
// HAProxy: every annotated Service of the directory is selected as from
// the API, each planned from its own slices, and the one naming a backend
// another holds is refused, naming the holder.
func TestManyServicesDryRunFromManifests(t *testing.T) {
	dir := t.TempDir()
	manifestsOf(t, filepath.Join(dir, "shop.yaml"), annotatedShop([]string{"127.0.0.61:8080", "127.0.0.62:8080"}, []string{"127.0.0.63:9090"})...)
	code, stdout, stderr := runCommand(t, "reconcile --dry-run --manifests "+dir, "SERVICE_SELECTION=annotation", "ANNOTATION_BACKENDS=be_*",
		"TARGET_ADDRESS=pod", "ALLOWED_SERVER_CIDRS=127.0.0.0/8")
	var res fleetAnswer
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || res.Status != "planned" {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	got := map[string]string{}
	for _, s := range res.Services {
		for _, tr := range s.Targets {
			got[s.Service] = tr.Backend + " " + strings.Join(tr.Add, ",")
		}
	}
	want := map[string]string{"shop/web": "be_web 127-0-0-61,127-0-0-62", "shop/api": "be_api 127-0-0-63"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("services planned %v, want %v", got, want)
	}
	if len(res.Refused) != 1 || res.Refused[0].Service != "shop/web-canary" || res.Refused[0].Holder != "shop/web" {
		t.Errorf("refused %+v, want shop/web-canary held off by shop/web", res.Refused)
	}
	if !strings.Contains(stderr, `"source":"manifests `+dir+`"`) {
		t.Errorf("the configured line does not say the source: %s", stderr)
	}
	// WATCH_NAMESPACES holds as from the API.
	_, stdout, _ = runCommand(t, "reconcile --dry-run --manifests "+dir, "SERVICE_SELECTION=annotation", "ANNOTATION_BACKENDS=be_*",
		"TARGET_ADDRESS=pod", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "WATCH_NAMESPACES=other")
	if res = (fleetAnswer{}); json.Unmarshal([]byte(stdout), &res) != nil || len(res.Services)+len(res.Refused) != 0 {
		t.Errorf("WATCH_NAMESPACES=other: %s", stdout)
	}
}

// TestClassDryRunFromManifestsPlansFrontends (issue 54 row 9): in class
// mode, a dry run from manifests with no Data Plane API says what it would
// create: per TCP port a frontend bound on HAPROXY_VIP:port and its
// backend, and the servers of each backend; a UDP port is refused alone.
func TestClassDryRunFromManifestsPlansFrontends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lb.yaml")
	manifestsOf(t, path, svcDoc{namespace: "lb", name: "shop", class: "haproxy-k8s-sync.io/haproxy", addrs: []string{"127.0.0.71:8080"}})
	code, stdout, stderr := runCommand(t, "reconcile --dry-run --manifests "+path, "SERVICE_SELECTION=class", "HAPROXY_VIP=192.0.2.10",
		"TARGET_ADDRESS=pod", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "CLUSTER_NAME=eu1")
	var res fleetAnswer
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || res.Status != "planned" {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var plan []string
	for _, st := range res.FrontendPlan {
		if st.Target != noFrontendsTarget {
			t.Errorf("target %q", st.Target)
		}
		plan = append(plan, fmt.Sprintf("%s %s %s %s %s %s", st.Service, st.FrontendAction, st.Frontend, st.Bind, st.BackendAction, st.Backend))
	}
	wantPlan := []string{
		"lb/shop create fe_k8s_eu1_lb_shop_80 192.0.2.10:80 create be_k8s_eu1_lb_shop_80",
		"lb/shop create fe_k8s_eu1_lb_shop_443 192.0.2.10:443 create be_k8s_eu1_lb_shop_443",
	}
	if !reflect.DeepEqual(plan, wantPlan) {
		t.Errorf("frontend plan\n%s\nwant\n%s", strings.Join(plan, "\n"), strings.Join(wantPlan, "\n"))
	}
	var servers []string
	for _, s := range res.Services {
		for _, tr := range s.Targets {
			servers = append(servers, tr.Backend+" "+strings.Join(tr.Add, ","))
		}
	}
	if want := []string{"be_k8s_eu1_lb_shop_443 eu1-127-0-0-71", "be_k8s_eu1_lb_shop_80 eu1-127-0-0-71"}; !reflect.DeepEqual(sorted(servers), want) {
		t.Errorf("servers planned %v, want %v", servers, want)
	}
	if len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Reason, "53/UDP") {
		t.Errorf("refused %+v, want the UDP port alone", res.Refused)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// TestServeManifestsManyServices (issue 54 row 9): `serve --manifests DIR`
// in annotation mode reconciles both annotated Services into a real
// HAProxy by itself (each backend takes traffic to its own pods, the
// refused Service's pod in neither), and an edit of the files reaches the
// backend it concerns with nobody posting.
func TestServeManifestsManyServices(t *testing.T) {
	lines := []string{"balance roundrobin", "option tcp-check"}
	h := haproxytest.Start(t, haproxytest.Backend{Name: "be_web", Lines: lines}, haproxytest.Backend{Name: "be_api", Lines: lines})
	// A slice's endpoints share its port: one port per Service, free on
	// the first address (a bind of the wildcard would take it there too).
	webPort, apiPort := haproxytest.FreePort(t, "127.0.0.61"), haproxytest.FreePort(t, "127.0.0.63")
	at := func(host string, port int) string { return fmt.Sprintf("%s:%d", host, port) }
	web1, web2, api1, api2 := at("127.0.0.61", webPort), at("127.0.0.62", webPort), at("127.0.0.63", apiPort), at("127.0.0.64", apiPort)
	for name, addr := range map[string]string{"web-1": web1, "web-2": web2, "api-1": api1, "api-2": api2} {
		haproxytest.Listen(t, name, addr)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "shop.yaml")
	manifestsOf(t, file, annotatedShop([]string{web1, web2}, []string{api1})...)
	logs := &lockedBuffer{}
	cmd := command(t, "serve --manifests "+dir, "SERVICE_SELECTION=annotation", "ANNOTATION_BACKENDS=be_*", "TARGET_ADDRESS=pod",
		"HAPROXY_RUNTIME_URL="+h.RuntimeURL(), "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "WEBHOOK_AUTH=none", "LOG_LEVEL=info",
		fmt.Sprintf("PORT=%d", freePort(t)))
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// served says which listeners answer through backend's frontend, once
	// every server there is UP and in service.
	served := func(backend string) string {
		srvs := h.Servers(t, backend)
		for _, s := range srvs {
			if !s.Up() || s.Maint() {
				return fmt.Sprintf("%d servers, not all in service", len(srvs))
			}
		}
		var names []string
		for name := range haproxytest.Spread(h.Frontends[backend], 6) {
			names = append(names, name)
		}
		return strings.Join(sorted(names), ",")
	}
	until := func(what, backend, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := served(backend); got != want; got = served(backend) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s serves %q, want %q\n%s", what, backend, got, want, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	until("at start", "be_web", "web-1,web-2")
	until("at start", "be_api", "api-1")
	if !strings.Contains(logs.String(), `"refused":1`) {
		t.Errorf("the refused Service is not counted:\n%s", logs.String())
	}

	manifestsOf(t, file, annotatedShop([]string{web1, web2}, []string{api1, api2})...)
	until("after an edit", "be_api", "api-1,api-2")
	if !strings.Contains(logs.String(), `"msg":"manifests changed: reconciling"`) {
		t.Errorf("the change was not said:\n%s", logs.String())
	}
	if got := served("be_web"); got != "web-1,web-2" {
		t.Errorf("be_web serves %q after api's edit", got)
	}
}

// TestClassReconcileFromManifests: class mode from manifests through a Data
// Plane API: the first `reconcile --manifests` makes the frontend bound on
// HAPROXY_VIP:port and its backend (the Service waits for HAProxy's reload),
// the next adds the servers; a dry run then reads the target back and
// plans nothing more: both sections in place. No status is written: there
// is no API to write it to.
func TestClassReconcileFromManifests(t *testing.T) {
	api := dataplanetest.New(t, dataplanetest.Options{})
	path := filepath.Join(t.TempDir(), "lb.yaml")
	manifestsOf(t, path, svcDoc{namespace: "lb", name: "shop", class: "haproxy-k8s-sync.io/haproxy", addrs: []string{"127.0.0.71:8080"}})
	env := []string{"SERVICE_SELECTION=class", "HAPROXY_VIP=192.0.2.10", "TARGET_ADDRESS=pod", "ALLOWED_SERVER_CIDRS=127.0.0.0/8", "HAPROXY_DATAPLANE_URL=" + api.URL}
	code, stdout, stderr := runCommand(t, "reconcile --manifests "+path, env...)
	if code != 0 || !strings.Contains(stdout, `"created":["fe_k8s_lb_shop_443","fe_k8s_lb_shop_80"]`) || !strings.Contains(stdout, `"loading":["lb/shop"]`) {
		t.Fatalf("first run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	fe, binds, ok := api.Frontend("fe_k8s_lb_shop_80")
	if !ok || fe.DefaultBackend != "be_k8s_lb_shop_80" || len(binds) != 1 || binds[0].Address != "192.0.2.10" || binds[0].Port == nil || *binds[0].Port != 80 {
		t.Fatalf("frontend %v %+v %+v, want bound on 192.0.2.10:80 to be_k8s_lb_shop_80", ok, fe.DefaultBackend, binds)
	}
	code, stdout, stderr = runCommand(t, "reconcile --manifests "+path, env...)
	if srvs := api.Servers("be_k8s_lb_shop_80"); code != 0 || len(srvs) != 1 || srvs[0].Address != "127.0.0.71" {
		t.Fatalf("second run: exit %d, servers %d\nstdout %s\nstderr %s", code, len(srvs), stdout, stderr)
	}
	code, stdout, stderr = runCommand(t, "reconcile --dry-run --manifests "+path, env...)
	var res fleetAnswer
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.FrontendPlan) != 2 {
		t.Fatalf("dry run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	for _, st := range res.FrontendPlan {
		if st.Target != api.URL || st.FrontendAction != actInPlace || st.BackendAction != actInPlace {
			t.Errorf("dry run after both runs: %+v, want both in place on %s", st, api.URL)
		}
	}
}
