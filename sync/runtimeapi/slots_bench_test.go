package runtimeapi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/runtimeapi"
)

// BenchmarkReloadByOthers measures what a reload by others (systemctl
// reload) costs the clients of a backend the admin socket alone keeps, under
// load (two clients in a loop): with slots and the state saved first, as the
// documented drop-in does, and with the servers added by "add server",
// which the reload drops until the service adds them again (its loop
// here: a reconcile every 50 ms, the pace of its reload watch and
// follow-up). Reported: failed requests per reload, and the ms a new
// endpoint takes from the first reconcile that names it to its first
// client (entry).
func BenchmarkReloadByOthers(b *testing.B) {
	for _, slots := range []bool{true, false} {
		b.Run(map[bool]string{true: "slots-state-saved", false: "added-servers"}[slots], func(b *testing.B) {
			lines := []string{"balance roundrobin", "option tcp-check", "load-server-state-from-file global",
				"default-server inter 200ms rise 1 fall 1"}
			if slots {
				lines = append(lines, "server-template k8s 1-4 k8s.invalid:1 check init-addr last,0.0.0.0")
			}
			h := haproxytest.StartWith(b, haproxytest.Options{StateFile: true}, haproxytest.Backend{Name: "be", Lines: lines})
			c, err := runtimeapi.New(h.RuntimeURL(), model.Settings{Balance: "roundrobin", TCPCheck: true}, chk)
			if err != nil {
				b.Fatal(err)
			}
			var eps []model.Server
			for i, port := range haproxytest.FreePorts(b, "127.0.0.1", 4) {
				name := fmt.Sprintf("node-%d", i)
				haproxytest.Listen(b, name, fmt.Sprintf("127.0.0.1:%d", port))
				eps = append(eps, srv(name, "127.0.0.1", port, model.Ready))
			}
			var mu sync.Mutex
			desired := want(eps[:3]...)
			ctx, cancel := context.WithCancel(context.Background())
			var loop sync.WaitGroup
			loop.Go(func() {
				for ctx.Err() == nil {
					mu.Lock()
					w := desired
					mu.Unlock()
					if cur, err := c.Read(ctx, "be"); err == nil {
						named, _ := plan.AssignSlots(cur, w, "")
						_, _ = c.Apply(ctx, plan.CalculateWith(cur, named, c.Policy()))
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
			defer func() { cancel(); loop.Wait() }()
			served := func(name string) bool {
				for range 20 {
					if got, err := haproxytest.Ask(h.Frontends["be"]); err == nil && got == name {
						return true
					}
				}
				return false
			}
			// Entry: the fourth endpoint, from the reconcile that names it.
			began := time.Now()
			mu.Lock()
			desired = want(eps...)
			mu.Unlock()
			for !served("node-3") {
				if time.Since(began) > 10*time.Second {
					b.Fatal("node-3 never entered service")
				}
			}
			entry := time.Since(began)

			load := haproxytest.StartLoad(h.Frontends["be"], 2)
			b.ResetTimer()
			for range b.N {
				if slots {
					h.DumpState(b)
				}
				h.Reload(b)
				time.Sleep(time.Second) // the dropped servers' return, and well past
			}
			b.StopTimer()
			load.Stop()
			b.ReportMetric(float64(load.Failed())/float64(b.N), "failed/reload")
			b.ReportMetric(float64(load.Sent())/float64(b.N), "requests/reload")
			b.ReportMetric(float64(entry.Milliseconds()), "entry-ms")
		})
	}
}
