package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
)

// TestProgrammingLatency: on a real kube-apiserver and HAProxy, a change
// stamped by its EndpointSlice (last-change-trigger-time) is timed once
// when HAProxy takes it and once when its server is in service after its
// check, whatever number of reconciles follow; a node whose only endpoint
// is replaced (a DaemonSet rollout: terminating, then a new ready one) is
// timed at each change; a slice without the stamp is counted, not timed.
func TestProgrammingLatency(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test", "unknown")
	w.rec.OnProgrammed = m.Programmed
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	ports := map[string]int32{"http": 8080}
	a, b := w.node("a", "127.0.11.1"), w.node("b", "127.0.11.2")
	listen(t, a, "127.0.11.1", np)
	listen(t, b, "127.0.11.2", np)
	target := w.rec.Targets[0].Name()

	type counts struct{ applied, inService, unstamped int }
	read := func(t *testing.T) counts {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var c counts
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				if strings.HasPrefix(mf.GetName(), "haproxy_k8s_sync_network_") && label(mt, "target") != target {
					t.Errorf("%s: target %q, want %q", mf.GetName(), label(mt, "target"), target)
				}
				switch mf.GetName() {
				case "haproxy_k8s_sync_network_programming_duration_seconds":
					c.applied += int(mt.GetHistogram().GetSampleCount())
				case "haproxy_k8s_sync_network_in_service_duration_seconds":
					c.inService += int(mt.GetHistogram().GetSampleCount())
				case "haproxy_k8s_sync_network_programming_unmeasured_total":
					c.unstamped += int(mt.GetCounter().GetValue())
				}
			}
		}
		return c
	}
	expect := func(t *testing.T, want counts) {
		t.Helper()
		if got := read(t); got != want {
			t.Fatalf("timed %+v, want %+v", got, want)
		}
	}

	step(t, "an endpoint on a new node: applied at its gate, in service after its check", func(t *testing.T) {
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.11.1", node: a})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.11.1", int(np), "ready"}})
		w.expectTraffic("be", a)
		expect(t, counts{applied: 1, inService: 1})
	})
	step(t, "more reconciles time nothing again", func(t *testing.T) {
		for range 3 {
			w.mustReconcile()
		}
		expect(t, counts{applied: 1, inService: 1})
	})
	step(t, "the node's endpoint replaced: drained, then ready again", func(t *testing.T) {
		// Each change comes a while after HAProxy's last change of the
		// server: within two seconds (HAProxy counts whole seconds, on
		// 3.1+ on the monotonic clock) it could be the previous change's
		// own next step, so it would be left out rather than risk
		// counting a stamp twice.
		time.Sleep(3100 * time.Millisecond)
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.11.1", node: a, terminating: true})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.11.1", int(np), "drain"}})
		expect(t, counts{applied: 2, inService: 1})
		time.Sleep(3100 * time.Millisecond)
		w.slice("web-1", "web", ports, endpoint{ip: "10.244.11.2", node: a})
		w.mustReconcile()
		w.expectServers("be", map[string]server{a: {"127.0.11.1", int(np), "ready"}})
		w.expectTraffic("be", a)
		expect(t, counts{applied: 3, inService: 2})
	})
	step(t, "a slice without the stamp is counted, not timed", func(t *testing.T) {
		w.sliceAt("web-2", "web", ports, time.Time{}, endpoint{ip: "10.244.11.3", node: b})
		w.mustReconcile()
		w.expectTraffic("be", a, b)
		expect(t, counts{applied: 3, inService: 2, unstamped: 2})
	})
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
