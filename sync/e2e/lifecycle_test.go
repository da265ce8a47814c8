package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/metrics"
)

// TestNodeLifecycle: eight Nodes each host a ready endpoint. The exclude
// label and its legacy name, the autoscaler's deletion taint, Karpenter's
// disruption taint, a cordon (with CORDONED_NODES=drain) and the state
// annotation move their servers as README's table says, on a real
// HAProxy, with traffic to match; an invalid annotation is skipped and
// reported; removing them all restores every server. Every transition is
// logged once in one shape and counted by reason.
func TestNodeLifecycle(t *testing.T) {
	w := newWorld(t, "web", desired.NodeMode, []desired.PortBackend{{Backend: "be"}})
	w.rec.Options.DrainCordoned = true
	var logs lockedBuffer
	w.rec.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "test", "unknown")
	w.rec.OnTransition = m.Transition

	names := []string{"plain", "excluded", "tainted", "cordoned", "pinned", "bad", "karpenter", "legacy"}
	nodes := map[string]string{}
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := int(svc.Spec.Ports[0].NodePort)
	var eps []endpoint
	for i, n := range names {
		ip := fmt.Sprintf("127.0.7.%d", i+1)
		nodes[n] = w.node(n, ip)
		listen(t, nodes[n], ip, int32(np))
		eps = append(eps, endpoint{ip: fmt.Sprintf("10.244.7.%d", i+1), node: nodes[n]})
	}
	w.slice("web-1", "web", map[string]int32{"http": 8080}, eps...)
	all := func() map[string]server {
		out := map[string]server{}
		for i, n := range names {
			out[nodes[n]] = server{fmt.Sprintf("127.0.7.%d", i+1), np, "ready"}
		}
		return out
	}
	step(t, "every node ready", func(t *testing.T) {
		w.mustReconcile()
		w.expectServers("be", all())
	})
	step(t, "label, taint, cordon, annotations", func(t *testing.T) {
		w.patchNode(nodes["excluded"], func(n *corev1.Node) { n.Labels[desired.LabelExcludeFromLB] = "" })
		w.patchNode(nodes["tainted"], func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: desired.TaintToBeDeleted, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
		})
		w.patchNode(nodes["karpenter"], func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: desired.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule})
		})
		w.patchNode(nodes["legacy"], func(n *corev1.Node) { n.Labels[desired.LabelExcludeBalancer] = "true" })
		w.patchNode(nodes["cordoned"], func(n *corev1.Node) { n.Spec.Unschedulable = true })
		w.patchNode(nodes["pinned"], func(n *corev1.Node) { n.Annotations[desired.AnnotationState] = "maint" })
		w.patchNode(nodes["bad"], func(n *corev1.Node) { n.Annotations[desired.AnnotationState] = "off" })
		res := w.mustReconcile()
		want := all()
		delete(want, nodes["excluded"])
		delete(want, nodes["legacy"])
		want[nodes["tainted"]] = server{"127.0.7.3", np, "drain"}
		want[nodes["karpenter"]] = server{"127.0.7.7", np, "drain"}
		want[nodes["cordoned"]] = server{"127.0.7.4", np, "drain"}
		want[nodes["pinned"]] = server{"127.0.7.5", np, "maint"}
		w.expectServers("be", want)
		w.expectTraffic("be", nodes["plain"], nodes["bad"])
		if len(res.Skipped) != 1 || res.Skipped[0].Reason != desired.ReasonInvalidAnnotation {
			t.Errorf("skipped %+v", res.Skipped)
		}
	})
	step(t, "all removed: every server back", func(t *testing.T) {
		for _, n := range []string{"excluded", "tainted", "cordoned", "pinned", "bad", "karpenter", "legacy"} {
			w.patchNode(nodes[n], func(n *corev1.Node) {
				delete(n.Labels, desired.LabelExcludeFromLB)
				delete(n.Labels, desired.LabelExcludeBalancer)
				delete(n.Annotations, desired.AnnotationState)
				n.Spec.Taints, n.Spec.Unschedulable = nil, false
			})
		}
		w.mustReconcile()
		w.expectServers("be", all())
		var want []string
		for _, n := range names {
			want = append(want, nodes[n])
		}
		w.expectTraffic("be", want...)
	})

	// One log line per transition, in one shape.
	type line struct{ Msg, Server, Backend, Target, From, To, Reason string }
	got := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var l line
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "server transition" {
			continue
		}
		if l.Backend != "be" || l.Target == "" {
			t.Errorf("transition line %+v", l)
		}
		got[fmt.Sprintf("%s %s>%s %s", strings.TrimPrefix(l.Server, w.ns+"-"), l.From, l.To, l.Reason)]++
	}
	// Before 3.0 a server is deleted by a later reconcile, once parked.
	for _, n := range []string{"excluded", "legacy"} {
		if got[n+" ready>maint label"] == 1 && got[n+" maint>deleted label"] == 1 {
			delete(got, n+" ready>maint label")
			delete(got, n+" maint>deleted label")
			got[n+" ready>deleted label"]++
		}
	}
	want := map[string]int{
		// first sync: each server gated (held in drain) until its check passes
		"plain absent>gated awaiting-check": 1, "tainted absent>gated awaiting-check": 1, "cordoned absent>gated awaiting-check": 1,
		"pinned absent>gated awaiting-check": 1, "bad absent>gated awaiting-check": 1,
		"karpenter absent>gated awaiting-check": 1,
		"excluded absent>gated awaiting-check":  2, "legacy absent>gated awaiting-check": 2, // and back at the end
		// and into service from the gate: gated on exit as on entry
		"plain gated>ready endpoints": 1, "bad gated>ready endpoints": 1, "excluded gated>ready endpoints": 2, "legacy gated>ready endpoints": 2,
		"tainted gated>ready endpoints": 1, "karpenter gated>ready endpoints": 1, "cordoned gated>ready endpoints": 1,
		// labels, taints, cordon, annotation
		"excluded ready>deleted label": 1, "legacy ready>deleted label": 1, "tainted ready>drain taint": 1, "karpenter ready>drain taint": 1,
		"cordoned ready>drain cordon": 1, "pinned ready>maint annotation": 1,
		// all removed: back from drain at once (checks ran), from maintenance through the gate
		"tainted drain>ready endpoints": 1, "karpenter drain>ready endpoints": 1, "cordoned drain>ready endpoints": 1,
		"pinned maint>gated awaiting-check": 1, "pinned gated>ready endpoints": 2,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions logged %v\nwant %v", got, want)
	}
	count := func(to, reason string) float64 {
		return testutil.ToFloat64(mustCounter(t, reg, "haproxy_k8s_sync_server_transitions_total", to, reason))
	}
	if count("drain", "taint") != 2 || count("drain", "cordon") != 1 || count("maint", "annotation") != 1 ||
		count("deleted", "label") != 2 || count("ready", "endpoints") != 8+6 {
		t.Errorf("transition metric: taint %v cordon %v annotation %v label %v endpoints %v", count("drain", "taint"),
			count("drain", "cordon"), count("maint", "annotation"), count("deleted", "label"), count("ready", "endpoints"))
	}
}

// mustCounter finds one counter series of family name with labels to and
// reason in reg.
func mustCounter(t *testing.T, reg *prometheus.Registry, name, to, reason string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range mt.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["to"] == to && labels["reason"] == reason {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return mt.GetCounter().GetValue() })
			}
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return 0 })
}

// patchNode changes a Node (its spec and metadata) through the API server.
func (w *world) patchNode(name string, f func(*corev1.Node)) {
	w.t.Helper()
	n, err := cluster.client.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	f(n)
	if _, err := cluster.client.CoreV1().Nodes().Update(w.ctx, n, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}
