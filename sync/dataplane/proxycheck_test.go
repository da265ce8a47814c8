package dataplane

import (
	"encoding/json"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestCheckSendProxyFollowsTheCheckPort: a server's checks carry the PROXY
// header only when they go to its own port (model.Check.ProxyOnCheck): a
// server 0.8.8 wrote with check-send-proxy and kube-proxy's health port
// reads with a zero check, so that the planner rewrites it (every such
// Node was DOWN), and a write gives it none.
func TestCheckSendProxyFollowsTheCheckPort(t *testing.T) {
	const base = `{"name":"n-1","address":"10.250.0.1","port":31000,"check":"enabled","inter":1500,"rise":2,"fall":2,"send-proxy-v2":"enabled"`
	for _, c := range []struct {
		raw     string
		rewrite bool
	}{
		{base + `,"check-send-proxy":"enabled","health_check_port":32000}`, true},
		{base + `,"health_check_port":32000}`, false},
		{base + `,"check-send-proxy":"enabled"}`, false},
		{base + `}`, false}, // its own port: HAProxy sends the header on its checks without the keyword
	} {
		s, err := serverOf(json.RawMessage(c.raw))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Check == (model.Check{}); got != c.rewrite {
			t.Errorf("%s: read check %+v, rewrite %v, want %v", c.raw, s.Check, got, c.rewrite)
		}
	}
	for port, want := range map[int]string{0: enabled, 32000: ""} {
		srv := model.Server{Name: "n-1", Address: "10.250.0.1", Port: 31000, Weight: 1, State: model.Ready,
			Check: model.Check{Inter: 1500, Rise: 2, Fall: 2, SendProxyV2: true, Port: port}}
		m, err := serverModel(srv, nil)
		if err != nil || m.SendProxyV2 != enabled || m.CheckSendProxy != want {
			t.Errorf("check port %d: send-proxy-v2 %q check-send-proxy %q (%v), want enabled and %q", port, m.SendProxyV2, m.CheckSendProxy, err, want)
		}
	}
}
