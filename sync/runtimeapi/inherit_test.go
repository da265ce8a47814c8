package runtimeapi

import (
	"strings"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// TestAddCarriesInheritedKeywords: an add, and a re-add, write
// plan.Change.Inherit (what haproxy.cfg's default-server gives the server)
// right after the address, before the server's own keywords, which win as
// they do in haproxy.cfg.
func TestAddCarriesInheritedKeywords(t *testing.T) {
	s := model.Server{Name: "a", Address: "10.0.0.1", Port: 80, Weight: 1, State: model.Drain,
		Check: model.Check{Inter: time.Second, Rise: 2, Fall: 2}}
	a := &applier{version: Version{Major: 2, Minor: 6}, nextID: idBase}
	inherit := []string{"send-proxy-v2", "maxconn 100"}
	add := a.addSteps("be/a", plan.Change{Action: plan.Add, Name: "a", New: &s, Gate: true, Inherit: inherit})
	want := "add server be/a 10.0.0.1:80 send-proxy-v2 maxconn 100 weight 1 check inter 1000ms rise 2 fall 2 id 16777216"
	if add[0].Cmd != want {
		t.Errorf("add:\n got %s\nwant %s", add[0].Cmd, want)
	}
	old := s
	old.State = model.Maint
	old.Runtime = &model.Runtime{ID: 7}
	re := a.reAddSteps("be/a", plan.Change{Action: plan.Drain, Name: "a", Old: &old, New: &s, Gate: true, Renew: true, Inherit: inherit})
	var got string
	for _, st := range re {
		if strings.HasPrefix(st.Cmd, "add server") {
			got = st.Cmd
		}
	}
	if !strings.HasPrefix(got, "add server be/a 10.0.0.1:80 send-proxy-v2 maxconn 100 weight 1 ") || !strings.HasSuffix(got, " id 7") {
		t.Errorf("re-add: %q", got)
	}
}
