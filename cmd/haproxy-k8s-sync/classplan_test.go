package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/lb"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// TestFrontendSteps: a class dry run's frontend plan says, port by port on
// one target, what lb.Compute would write: a frontend and backend to
// create, a frontend to rebind, both in place; why a Service gets nothing
// (an operator's section of its name); and the owned sections no Service
// wants any more (a backend drains first, a lone frontend goes).
func TestFrontendSteps(t *testing.T) {
	own := lb.Owner{Class: "c"}
	web := services.Selected{Namespace: "shop", Name: "web", Class: true, Ports: []services.Port{{Port: 80, Backend: "be_k8s_shop_web_80"}}}
	annotated := services.Selected{Namespace: "shop", Name: "api", Ports: []services.Port{{Port: 80, Backend: "be_api"}}}
	mark := own.Mark("shop/web")
	fe := func(name, desc, addr string) dataplane.Frontend {
		return dataplane.Frontend{Name: name, Description: desc, DefaultBackend: "be" + strings.TrimPrefix(name, "fe"), Binds: []dataplane.Bind{{Address: addr, Port: 80}}}
	}
	for _, tt := range []struct {
		name string
		held dataplane.Proxies
		want []string
	}{
		{"nothing held: both made", dataplane.Proxies{},
			[]string{"shop/web create fe_k8s_shop_web_80 192.0.2.10:80 create be_k8s_shop_web_80 "}},
		{"both in place", dataplane.Proxies{
			Frontends: []dataplane.Frontend{fe("fe_k8s_shop_web_80", mark, "192.0.2.10")},
			Backends:  []dataplane.ProxyBackend{{Name: "be_k8s_shop_web_80", Description: mark}}},
			[]string{"shop/web in place fe_k8s_shop_web_80 192.0.2.10:80 in place be_k8s_shop_web_80 "}},
		{"frontend bound elsewhere, backend missing", dataplane.Proxies{
			Frontends: []dataplane.Frontend{fe("fe_k8s_shop_web_80", mark, "192.0.2.99")}},
			[]string{"shop/web update fe_k8s_shop_web_80 192.0.2.10:80 create be_k8s_shop_web_80 "}},
		{"an operator's frontend of its name", dataplane.Proxies{
			Frontends: []dataplane.Frontend{fe("fe_k8s_shop_web_80", "mine", "192.0.2.10")}},
			[]string{`shop/web      frontend fe_k8s_shop_web_80 exists in haproxy.cfg without this instance's mark (description "mine"): left alone`}},
		{"owned sections no Service wants", dataplane.Proxies{
			Frontends: []dataplane.Frontend{fe("fe_k8s_shop_web_80", mark, "192.0.2.10"), fe("fe_k8s_old_a_80", own.Mark("old/a"), "192.0.2.20"), fe("fe_k8s_old_b_81", own.Mark("old/b"), "192.0.2.21")},
			Backends:  []dataplane.ProxyBackend{{Name: "be_k8s_shop_web_80", Description: mark}, {Name: "be_k8s_old_a_80", Description: own.Mark("old/a"), Servers: []dataplane.ProxyServer{{Name: "n"}}}}},
			[]string{
				"shop/web in place fe_k8s_shop_web_80 192.0.2.10:80 in place be_k8s_shop_web_80 ",
				"    drain be_k8s_old_a_80 ",
				" delete fe_k8s_old_b_81    ",
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := []services.Selected{annotated, web} // an annotated Service has no frontend
			steps := frontendSteps("tgt", "192.0.2.10", want, own, lb.Compute(want, tt.held, own, "192.0.2.10", nil))
			var got []string
			for _, st := range steps {
				if st.Target != "tgt" {
					t.Errorf("target %q", st.Target)
				}
				got = append(got, fmt.Sprintf("%s %s %s %s %s %s %s", st.Service, st.FrontendAction, st.Frontend, st.Bind, st.BackendAction, st.Backend, st.Error))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("steps\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
