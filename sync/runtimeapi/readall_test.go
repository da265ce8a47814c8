package runtimeapi_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// TestReadAllReadsWhatReadReads: on a real HAProxy with three backends
// (servers in service, one drained, one a server-template slot, one backend
// with no server), ReadAll's two commands give each backend with servers
// exactly what Read's two per backend give, and leave out the empty one
// (Read tells an empty backend from a missing one; ReadAll cannot).
func TestReadAllReadsWhatReadReads(t *testing.T) {
	h := haproxytest.Start(t,
		haproxytest.Backend{Name: "be_a", Lines: []string{"balance roundrobin", "option tcp-check"}},
		haproxytest.Backend{Name: "be_b", Lines: []string{"balance roundrobin", "option tcp-check", "server-template slot 2 127.0.0.1:1 disabled"}},
		haproxytest.Backend{Name: "be_empty", Lines: []string{"balance roundrobin"}})
	c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
	if err != nil {
		t.Fatal(err)
	}
	ports := haproxytest.FreePorts(t, "127.0.0.1", 3)
	for i, p := range ports {
		haproxytest.Listen(t, fmt.Sprint("l", i), fmt.Sprintf("127.0.0.1:%d", p))
	}
	convergeOn(t, c, model.Backend{Name: "be_a", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Servers: []model.Server{
		srv("a1", "127.0.0.1", ports[0], model.Ready), srv("a2", "127.0.0.1", ports[1], model.Drain)}}, 3*time.Second)
	convergeOn(t, c, model.Backend{Name: "be_b", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Servers: []model.Server{
		srv("b1", "127.0.0.1", ports[2], model.Ready)}}, 3*time.Second)
	ctx := context.Background()
	all, err := c.ReadAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all["be_empty"]; ok {
		t.Error("be_empty is in ReadAll's answer: an empty backend cannot be told from a missing one there")
	}
	for _, b := range []string{"be_a", "be_b"} {
		one, err := c.Read(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := all[b]
		if !ok {
			t.Fatalf("%s missing from ReadAll", b)
		}
		if len(got.Servers) == 0 {
			t.Fatalf("%s: no server read", b)
		}
		for _, be := range []*model.Backend{&one, &got} {
			for i := range be.Servers {
				if be.Servers[i].Runtime != nil {
					be.Servers[i].Runtime.Since = 0 // read a moment apart
				}
			}
		}
		if !reflect.DeepEqual(one, got) {
			t.Errorf("%s:\nReadAll %+v\nRead    %+v", b, got, one)
		}
	}
}

// convergeOn is converge for backend w.Name.
func convergeOn(t *testing.T, c *runtimeapi.Client, w model.Backend, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		cur, err := c.Read(context.Background(), w.Name)
		if err != nil {
			t.Fatal(err)
		}
		p := plan.CalculateWith(cur, w, c.Policy())
		if !p.HasChanges() && !p.Pending() {
			return
		}
		if _, err := c.Apply(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not converged within %s: %+v", w.Name, within, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
