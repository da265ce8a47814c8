package lb

import (
	"reflect"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

const vip = "127.0.0.50"

func svc(name string, ports ...int32) services.Selected {
	s := services.Selected{Namespace: "default", Name: name, Class: true}
	for _, p := range ports {
		s.Ports = append(s.Ports, services.Port{Port: p})
	}
	return s
}

// pair is what Compute asks for the port of default/name, on cluster "".
func pair(name string, port int32, addr string) dataplane.Pair {
	fe, be := services.ClassNames("", "default", name, port)
	return dataplane.Pair{Frontend: fe, Backend: be, Description: Mark("", "default/"+name), Address: addr, Port: int64(port)}
}

// held is what HAProxy holds once p was made.
func heldFrontend(p dataplane.Pair) dataplane.Frontend {
	return dataplane.Frontend{Name: p.Frontend, Description: p.Description, DefaultBackend: p.Backend,
		Binds: []dataplane.Bind{{Name: "vip", Address: p.Address, Port: p.Port}}}
}

func heldBackend(p dataplane.Pair, servers ...dataplane.ProxyServer) dataplane.ProxyBackend {
	return dataplane.ProxyBackend{Name: p.Backend, Description: p.Description, Servers: servers}
}

// TestOwned: a section is an instance's when its name has the class prefix
// and its mark names the instance's cluster and class (issue 54 row 3: two
// installs of two classes on one HAProxy). A mark without a class, written
// before marks carried it, is adopted by the install that follows its
// Service, left to another install whose class the Service has, left alone
// out of the namespaces watched, and otherwise drained as before.
func TestOwned(t *testing.T) {
	const ours, theirs = "haproxy-k8s-sync.io/haproxy", "example.org/other"
	a := Owner{Class: ours}
	b := Owner{Class: theirs}
	withClasses := Owner{Class: ours, Classes: map[string]string{"default/web": theirs, "default/mine": ours}, Namespaces: []string{"default"}}
	for _, tc := range []struct {
		what, name, desc string
		o                Owner
		wanted           string
		want             bool
	}{
		{"ours", "fe_k8s_default_web_80", "haproxy-k8s-sync service=default/web class=" + ours, a, "", true},
		{"ours, backend", "be_k8s_default_web_80", "haproxy-k8s-sync service=default/web class=" + ours, a, "", true},
		{"another class's", "be_k8s_default_web_80", "haproxy-k8s-sync service=default/web class=" + theirs, a, "", false},
		{"ours, seen by the other class", "be_k8s_default_web_80", "haproxy-k8s-sync service=default/web class=" + ours, b, "default/web", false},
		{"ours with a cluster", "be_k8s_a_default_web_80", "haproxy-k8s-sync service=default/web class=" + ours + " cluster=a", Owner{Class: ours, Cluster: "a"}, "", true},
		{"an operator's", "fe_k8s_default_web_80", "", a, "", false},
		{"an operator's, described", "fe_k8s_default_web_80", "web frontend", a, "", false},
		{"not our prefix", "fe_web", "haproxy-k8s-sync service=default/web class=" + ours, a, "", false},
		{"another cluster's", "be_k8s_a_default_web_80", "haproxy-k8s-sync service=default/web class=" + ours + " cluster=a", a, "", false},
		{"a cluster-less instance's", "be_k8s_default_web_80", "haproxy-k8s-sync service=default/web class=" + ours, Owner{Class: ours, Cluster: "a"}, "", false},
		{"no service word", "be_k8s_default_web_80", "haproxy-k8s-sync", a, "", false},
		{"legacy, its Service followed: adopted", "be_k8s_default_web_80", "haproxy-k8s-sync service=default/web", withClasses, "default/web", true},
		{"legacy, its Service of another class: left to that install", "be_k8s_default_web_80", "haproxy-k8s-sync service=default/web", withClasses, "", false},
		{"legacy, its Service of our class but not followed (refused): ours", "be_k8s_default_mine_80", "haproxy-k8s-sync service=default/mine", withClasses, "", true},
		{"legacy, its Service gone: ours to drain", "be_k8s_default_gone_80", "haproxy-k8s-sync service=default/gone", withClasses, "", true},
		{"legacy, out of the namespaces watched: left alone", "be_k8s_other_gone_80", "haproxy-k8s-sync service=other/gone", withClasses, "", false},
		{"legacy, nothing listed: ours, as before", "be_k8s_default_web_80", "haproxy-k8s-sync service=default/web", a, "", true},
		{"legacy, another cluster's", "be_k8s_a_default_web_80", "haproxy-k8s-sync service=default/web cluster=a", a, "", false},
	} {
		wanted := map[string]bool{tc.wanted: tc.wanted != ""}
		if got := tc.o.Owned(tc.name, tc.desc, wanted); got != tc.want {
			t.Errorf("%s: Owned(%q, %q) by %+v = %v, want %v", tc.what, tc.name, tc.desc, tc.o, got, tc.want)
		}
	}
}

func TestCompute(t *testing.T) {
	web80, web443 := pair("web", 80, vip), pair("web", 443, vip)
	old := pair("old", 80, vip)
	operatorFE := dataplane.Frontend{Name: web80.Frontend, DefaultBackend: "be_mine", Binds: []dataplane.Bind{{Name: "b", Address: "127.0.0.9", Port: 80}}}
	for _, tc := range []struct {
		name    string
		want    []services.Selected
		held    dataplane.Proxies
		drained map[string]bool
		plan    Plan
	}{
		{name: "nothing held: one transaction creates every port's pair",
			want: []services.Selected{svc("web", 80, 443)},
			plan: Plan{Writes: []Write{{Service: "default/web", ProxyWrite: dataplane.ProxyWrite{
				CreateBackends: []dataplane.Pair{web80, web443}, CreateFrontends: []dataplane.Pair{web80, web443}}}}}},
		{name: "in place: nothing written, ready",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{heldFrontend(web80)}, Backends: []dataplane.ProxyBackend{heldBackend(web80)}},
			plan: Plan{Ready: map[string]bool{"default/web": true}}},
		{name: "not a class Service: nothing",
			want: []services.Selected{{Namespace: "default", Name: "web", Ports: []services.Port{{Port: 80, Backend: "be_x"}}}}},
		{name: "bind on another address: updated",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{heldFrontend(pair("web", 80, "127.0.0.51"))}, Backends: []dataplane.ProxyBackend{heldBackend(web80)}},
			plan: Plan{Writes: []Write{{Service: "default/web", ProxyWrite: dataplane.ProxyWrite{UpdateFrontends: []dataplane.Pair{web80}}}}}},
		{name: "backend gone, frontend held: backend created alone",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{heldFrontend(web80)}},
			plan: Plan{Writes: []Write{{Service: "default/web", ProxyWrite: dataplane.ProxyWrite{CreateBackends: []dataplane.Pair{web80}}}}}},
		{name: "an operator's frontend of the same name: never touched, the Service failed",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{operatorFE}},
			plan: Plan{Failed: map[string]string{"default/web": "frontend fe_k8s_default_web_80 exists in haproxy.cfg without this instance's mark"}}},
		{name: "an operator's backend of the same name: failed",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Backends: []dataplane.ProxyBackend{{Name: web80.Backend}}},
			plan: Plan{Failed: map[string]string{"default/web": "backend be_k8s_default_web_80 exists in haproxy.cfg without this instance's mark"}}},
		{name: "address:port bound by an operator's frontend: failed naming it",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{{Name: "fe_http", Binds: []dataplane.Bind{{Name: "b", Address: vip, Port: 80}}}}},
			plan: Plan{Failed: map[string]string{"default/web": "address 127.0.0.50:80 is bound by frontend fe_http"}}},
		{name: "port bound on every address by another frontend: failed",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{{Name: "fe_http", Binds: []dataplane.Bind{{Name: "b", Address: "*", Port: 80}}}}},
			plan: Plan{Failed: map[string]string{"default/web": "address 127.0.0.50:80 is bound by frontend fe_http"}}},
		{name: "another port on the same address: fine",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{{Name: "fe_http", Binds: []dataplane.Bind{{Name: "b", Address: vip, Port: 81}}}}},
			plan: Plan{Writes: []Write{{Service: "default/web", ProxyWrite: dataplane.ProxyWrite{
				CreateBackends: []dataplane.Pair{web80}, CreateFrontends: []dataplane.Pair{web80}}}}}},
		{name: "two Services on one port: the later refused naming the first's frontend, the first made",
			want: []services.Selected{svc("web", 80), svc("api", 80)},
			plan: Plan{Writes: []Write{{Service: "default/web", ProxyWrite: dataplane.ProxyWrite{
				CreateBackends: []dataplane.Pair{web80}, CreateFrontends: []dataplane.Pair{web80}}}},
				Failed: map[string]string{"default/api": "address 127.0.0.50:80 is asked for by frontend fe_k8s_default_web_80 first"}}},
		{name: "a Service gone, not drained: draining, nothing written; its port still held",
			want: []services.Selected{svc("web", 80)},
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{heldFrontend(old)}, Backends: []dataplane.ProxyBackend{heldBackend(old, dataplane.ProxyServer{Name: "s1"})}},
			plan: Plan{Draining: []string{old.Backend},
				Failed: map[string]string{"default/web": "address 127.0.0.50:80 is bound by frontend fe_k8s_default_old_80"}}},
		{name: "a Service gone and drained: its frontend and backend removed in one transaction",
			held:    dataplane.Proxies{Frontends: []dataplane.Frontend{heldFrontend(old)}, Backends: []dataplane.ProxyBackend{heldBackend(old)}},
			drained: map[string]bool{old.Backend: true},
			plan: Plan{Writes: []Write{{ProxyWrite: dataplane.ProxyWrite{
				DeleteFrontends: []string{old.Frontend}, DeleteBackends: []string{old.Backend}}}}}},
		{name: "an owned frontend alone, unwanted: removed at once",
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{heldFrontend(old)}},
			plan: Plan{Writes: []Write{{ProxyWrite: dataplane.ProxyWrite{DeleteFrontends: []string{old.Frontend}}}}}},
		{name: "unowned sections no Service wants: never touched",
			held: dataplane.Proxies{Frontends: []dataplane.Frontend{operatorFE, {Name: "fe_http", DefaultBackend: "be_http"}},
				Backends: []dataplane.ProxyBackend{{Name: "be_http"}, {Name: old.Backend}}},
			drained: map[string]bool{"be_http": true, old.Backend: true}},
		{name: "another cluster's pair: never touched",
			held:    dataplane.Proxies{Backends: []dataplane.ProxyBackend{{Name: "be_k8s_b_default_old_80", Description: Mark("b", "default/old")}}},
			drained: map[string]bool{"be_k8s_b_default_old_80": true}},
		{name: "a port that maps to another backend: failed",
			want: []services.Selected{{Namespace: "default", Name: "web", Class: true, Ports: []services.Port{{Port: 80, Backend: "be_web"}}}},
			plan: Plan{Failed: map[string]string{"default/web": "port 80 maps to backend be_web"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(tc.want, tc.held, Owner{}, vip, tc.drained)
			// Failure messages are compared by their start.
			for k, msg := range tc.plan.Failed {
				if !strings.HasPrefix(got.Failed[k], msg) {
					t.Errorf("Failed[%s] = %q, want it to start with %q", k, got.Failed[k], msg)
				}
				got.Failed[k] = msg
			}
			norm := func(p *Plan) {
				if p.Ready == nil {
					p.Ready = map[string]bool{}
				}
				if p.Failed == nil {
					p.Failed = map[string]string{}
				}
			}
			norm(&got)
			norm(&tc.plan)
			if !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan\n got %+v\nwant %+v", got, tc.plan)
			}
		})
	}
}

func TestDrained(t *testing.T) {
	maint := dataplane.ProxyServer{Name: "a", Maint: true}
	ready := dataplane.ProxyServer{Name: "b"}
	for _, tc := range []struct {
		name     string
		servers  []dataplane.ProxyServer
		sessions int
		known    bool
		want     bool
	}{
		{"no server", nil, 0, false, true},
		{"a server in service", []dataplane.ProxyServer{maint, ready}, 0, true, false},
		{"all parked, no session", []dataplane.ProxyServer{maint}, 0, true, true},
		{"all parked, sessions left", []dataplane.ProxyServer{maint}, 2, true, false},
		{"all parked, sessions unseen (no socket)", []dataplane.ProxyServer{maint}, 0, false, false},
	} {
		if got := Drained(dataplane.ProxyBackend{Name: "be", Servers: tc.servers}, tc.sessions, tc.known); got != tc.want {
			t.Errorf("%s: Drained = %v, want %v", tc.name, got, tc.want)
		}
	}
}
