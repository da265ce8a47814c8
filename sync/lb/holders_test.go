package lb

import (
	"maps"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplane"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// TestHolders: the ports of the load balancer address go to the Service
// the mark of the frontend that binds them names, for this instance's
// frontends only: not an operator's, another class's or another
// cluster's; a legacy mark (no class) counts as Owned counts it.
func TestHolders(t *testing.T) {
	o := Owner{Class: "lb", Cluster: "c1"}
	fe := func(name, description string, ports ...int64) dataplane.Frontend {
		f := dataplane.Frontend{Name: name, Description: description}
		for _, p := range ports {
			f.Binds = append(f.Binds, dataplane.Bind{Name: "b", Address: "127.0.0.71", Port: p})
		}
		return f
	}
	held := dataplane.Proxies{Frontends: []dataplane.Frontend{
		fe("fe_k8s_c1_apps_web_80", o.Mark("apps/web"), 80),
		fe("fe_k8s_c1_apps_api_443", Mark("c1", "apps/api"), 443),                                  // legacy: no class
		fe("fe_k8s_c1_apps_other_8080", Owner{Class: "other", Cluster: "c1"}.Mark("apps/x"), 8080), // another class's
		fe("fe_k8s_c2_apps_web_81", Owner{Class: "lb", Cluster: "c2"}.Mark("apps/y"), 81),          // another cluster's
		fe("fe_operator", "", 9000),                         // an operator's
		fe("fe_k8s_c1_apps_sock_0", o.Mark("apps/sock"), 0), // no port
	}}
	want := map[string]string{services.PortResource(80): "apps/web", services.PortResource(443): "apps/api"}
	if got := Holders(held, o); !maps.Equal(got, want) {
		t.Errorf("Holders = %v, want %v", got, want)
	}
}
