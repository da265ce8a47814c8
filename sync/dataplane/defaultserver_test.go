package dataplane

import (
	"slices"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
)

// TestInherit: the "add server" keywords a server inherits from the
// default-server lines of its backend and defaults sections (nearest
// first), those its own line leaves unset, and whether all can be carried.
func TestInherit(t *testing.T) {
	on, off := enabled, "disabled"
	n := func(v int64) *int64 { return &v }
	ds := func(p models.ServerParams) *models.DefaultServer { return &models.DefaultServer{ServerParams: p} }
	plain := model.Server{Name: "a", Address: "10.0.0.1", Port: 30080, Weight: 1, State: model.Ready,
		Check: model.Check{Inter: 2 * time.Second, Rise: 2, Fall: 3}}
	withOwn := plain
	withOwn.Check.FastInter, withOwn.Check.SendProxyV2 = 500*time.Millisecond, true
	for _, tc := range []struct {
		name     string
		sections []*models.DefaultServer // nearest first
		srv      model.Server
		want     []string
		carried  bool
	}{
		{name: "no default-server at all", sections: []*models.DefaultServer{nil, nil}, srv: plain, want: nil, carried: true},
		// check-send-proxy: haproxy.cfg's servers send the header on their
		// checks too; one added through the socket only when told.
		{name: "send-proxy-v2 in the defaults section", sections: []*models.DefaultServer{nil, ds(models.ServerParams{SendProxyV2: on})},
			srv: plain, want: []string{"send-proxy-v2", "check-send-proxy"}, carried: true},
		{name: "send-proxy-v2 with checks on another port", sections: []*models.DefaultServer{ds(models.ServerParams{SendProxyV2: on, HealthCheckPort: n(8081)})},
			srv: plain, want: []string{"send-proxy-v2", "port 8081"}, carried: true},
		{name: "ssl verify none", sections: []*models.DefaultServer{ds(models.ServerParams{Ssl: on, Verify: "none"})},
			srv: plain, want: []string{"ssl", "verify none"}, carried: true},
		{name: "maxconn and slowstart", sections: []*models.DefaultServer{ds(models.ServerParams{Maxconn: n(100), Slowstart: n(10000)})},
			srv: plain, want: []string{"maxconn 100", "slowstart 10000ms"}, carried: true},
		{name: "check-send-proxy", sections: []*models.DefaultServer{ds(models.ServerParams{CheckSendProxy: on, SendProxyV2: on})},
			srv: plain, want: []string{"send-proxy-v2", "check-send-proxy"}, carried: true},
		{name: "the server's own send-proxy-v2 and check timing win", sections: []*models.DefaultServer{ds(models.ServerParams{
			SendProxyV2: on, CheckSendProxy: on, Inter: n(5000), Rise: n(9), Fastinter: n(100), Downinter: n(3000)})},
			srv: withOwn, want: []string{"downinter 3000ms"}, carried: true},
		{name: "the backend's line wins over its defaults'", sections: []*models.DefaultServer{
			ds(models.ServerParams{SendProxyV2: off, Maxconn: n(5)}), ds(models.ServerParams{SendProxyV2: on, Maxconn: n(100), Slowstart: n(1000)})},
			srv: plain, want: []string{"maxconn 5", "slowstart 1000ms"}, carried: true},
		{name: "init-addr means nothing for an IP address", sections: []*models.DefaultServer{ds(models.ServerParams{InitAddr: ptr("last,libc,none"), Maxconn: n(7)})},
			srv: plain, want: []string{"maxconn 7"}, carried: true},
		{name: "a keyword with no add-server equivalent", sections: []*models.DefaultServer{nil, ds(models.ServerParams{Resolvers: "dns", SendProxyV2: on})},
			srv: plain, want: []string{"send-proxy-v2", "check-send-proxy"}, carried: false},
		{name: "a keyword this service does not carry", sections: []*models.DefaultServer{ds(models.ServerParams{Sni: "str(x)"})},
			srv: plain, want: nil, carried: false},
		{name: "a value that would cut the CLI line", sections: []*models.DefaultServer{ds(models.ServerParams{Ssl: on, Verify: "required", SslCafile: "/x;del server be/a"})},
			srv: plain, want: []string{"ssl", "verify required"}, carried: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := inheritance{sections: tc.sections}.inherit(tc.srv)
			if !slices.Equal(got.Keywords, tc.want) || got.Carried != tc.carried {
				t.Errorf("inherit = %q carried %v (unknown %q), want %q carried %v", got.Keywords, got.Carried, got.Unknown, tc.want, tc.carried)
			}
		})
	}
}
