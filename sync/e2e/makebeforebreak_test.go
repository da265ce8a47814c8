package e2e

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// TestEveryServerReplacedKeepsServing: both nodes of a Service replaced at
// once (their endpoints move to two new nodes, whose servers must pass
// their checks first), under continuous client load through HAProxy's
// frontend (a fresh connection per request), reconciled as the follow-up
// would, with both drivers. The old servers keep their traffic until a new
// one is in service (make-before-break), then leave: every request is
// answered and the backend never has no server in service. Before, the
// first reconcile parked the old servers at once and the backend was empty
// until the first new check passed ("backend has no server available!").
func TestEveryServerReplacedKeepsServing(t *testing.T) {
	for _, drv := range []string{"runtime", "dataplane"} {
		t.Run(drv, func(t *testing.T) {
			var makeDriver []driverFor
			if drv == "dataplane" {
				var api *dataplanetest.Server
				makeDriver = append(makeDriver, dataplaneDriver(&api, 5*time.Second))
			}
			w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}}, makeDriver...)
			svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
			np := svc.Spec.Ports[0].NodePort
			var names []string
			for i := range 4 {
				ip := fmt.Sprintf("127.0.11.%d", i+1)
				name := w.node(fmt.Sprintf("n%d", i), ip)
				listen(t, name, ip, np)
				names = append(names, name)
			}
			ports := map[string]int32{"http": 8080}
			w.slice("web-1", "web", ports, endpoint{ip: "10.244.11.1", node: names[0]}, endpoint{ip: "10.244.11.2", node: names[1]})
			w.mustReconcile()
			w.expectTraffic("be", names[0], names[1])

			// Clients: a fresh connection per request, until told to stop.
			var sent, failed atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					sent.Add(1)
					if name, err := haproxytest.Ask(w.h.Frontends["be"]); err != nil || name == "" {
						failed.Add(1)
					}
				}
			}()

			w.slice("web-1", "web", ports, endpoint{ip: "10.244.11.3", node: names[2]}, endpoint{ip: "10.244.11.4", node: names[3]})
			empty := 0
			deadline := time.Now().Add(15 * time.Second)
			for {
				_, res := w.reconcile()
				in := 0
				srvs := w.h.Servers(t, "be")
				for _, s := range srvs {
					if s.Up() && !s.Maint() && !s.Drain() && s.Weight > 0 {
						in++
					}
				}
				if in == 0 {
					empty++
				}
				// The Data Plane API driver deletes in batches: parked is gone.
				gone := func(n string) bool { s, ok := srvs[n]; return !ok || s.Maint() }
				if !res.Pending() && gone(names[0]) && gone(names[1]) && in == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not converged after 15s: %+v", res.Targets[0])
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			close(stop)
			<-done
			if empty > 0 || failed.Load() > 0 {
				t.Errorf("%d samples with no server in service; %d of %d requests failed", empty, failed.Load(), sent.Load())
			}
			if sent.Load() < 50 {
				t.Errorf("only %d requests sent: the load proves nothing", sent.Load())
			}
			w.expectTraffic("be", names[2], names[3])
			t.Logf("%d requests, %d failed", sent.Load(), failed.Load())
		})
	}
}
