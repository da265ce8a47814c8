package history

import (
	"slices"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
)

// TestHostileSlicesGiveNoServer: with the histories' configuration, the
// service takes a server from none of Config.Hostile's slices, and the one
// pod beside them keeps its own; without ALLOWED_SERVER_CIDRS and
// ENDPOINTSLICE_MANAGED_BY the outside address and the mirrored slice
// would give servers, so a history with them judges both filters.
func TestHostileSlicesGiveNoServer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env        map[string]string
		wantExtras []string
	}{
		{"as drawn", map[string]string{"ALLOWED_SERVER_CIDRS": allowedCIDRs, "ENDPOINTSLICE_MANAGED_BY": controllerManaged}, nil},
		{"no managed-by filter", map[string]string{"ALLOWED_SERVER_CIDRS": allowedCIDRs, "ENDPOINTSLICE_MANAGED_BY": ""}, []string{hostileAddr(5)}},
		{"all loopback allowed", map[string]string{"ALLOWED_SERVER_CIDRS": "127.0.0.0/8,10.0.0.0/8", "ENDPOINTSLICE_MANAGED_BY": controllerManaged}, []string{"10.245.0.1", "127.1.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"TARGET_ADDRESS": "pod", "INGRESS_NAMESPACE": namespace, "INGRESS_SERVICE_NAME": service,
				"HAPROXY_BACKEND_NAME": backend, "HAPROXY_RUNTIME_URL": "unix:///nonexistent.sock"}
			for k, v := range tc.env {
				env[k] = v
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			cfg, err := config.Load()
			if err != nil {
				t.Fatal(err)
			}
			w := &world{setup: Setup{Config: Config{Hostile: true}}, k8s: map[int]podState{1: live}, port: 8080, names: map[int]string{}}
			in := w.input()
			bes, _, err := desired.Compute(in, cfg.Options())
			if err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, be := range bes {
				for _, s := range be.Servers {
					if s.Address != podAddr(1) {
						addrs = append(addrs, s.Address)
					}
				}
			}
			slices.Sort(addrs)
			want := slices.DeleteFunc(slices.Clone(tc.wantExtras), func(a string) bool {
				// The outside address is the namespace's or loopback's.
				return a == "10.245.0.1" && !privateNet || a == "127.1.0.1" && privateNet
			})
			if !slices.Equal(addrs, want) {
				t.Errorf("servers beside the pod's at %v, want %v", addrs, want)
			}
		})
	}
}
