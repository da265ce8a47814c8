package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/fleet"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/kube"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// TestFullReconcileReadsEachKindOnce (issue 54, a full reconcile that
// scales): on a real kube-apiserver and HAProxy, with fleet.Inputs as serve
// wires it, a full reconcile that changes nothing reads HAProxy once (every
// backend in one read) and reads no backend alone, and its result is the
// one each Service's own reads give; a Service whose endpoints changed, and
// a new Service whose backend is empty, are read afresh and written, the
// others not touched, with traffic through their frontends.
func TestFullReconcileReadsEachKindOnce(t *testing.T) {
	const n = 10
	var backends []string
	for i := range n + 1 {
		backends = append(backends, fmt.Sprintf("be_%02d", i))
	}
	fw := newFleetWorld(t, backends...)
	w := &world{t: t, ns: fw.ns, ctx: context.Background()}
	for i := range n {
		svc := fmt.Sprintf("web%02d", i)
		port := int32(22000 + i)
		fw.annotated(svc, backends[i])
		w.slice(svc+"-1", svc, map[string]int32{"http": port}, endpoint{ip: "10.244.0.1", pod: svc + "-a"}, endpoint{ip: "10.244.0.2", pod: svc + "-b"})
		listen(t, svc+"-a", "10.244.0.1", port)
		listen(t, svc+"-b", "10.244.0.2", port)
	}
	full := func() fleet.Result {
		res, err := fw.f.Reconcile(context.Background(), false)
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return res
	}
	settle(t, full)
	each := full() // every Service reads its own
	fw.f.Inputs = kube.Bulk{Client: cluster.service, Namespaces: []string{fw.ns}}
	fw.drv.touched()
	fw.drv.bulkReads()
	once := full()
	read, written := fw.drv.touched()
	if bulk := fw.drv.bulkReads(); bulk != 1 || len(read) != 0 || len(written) != 0 {
		t.Fatalf("a no-op full reconcile: %d bulk reads, read %v alone, wrote %v; want one, none, none", bulk, read, written)
	}
	if once.Status != reconcile.StatusUnchanged || len(once.Services) != n {
		t.Fatalf("no-op from one read: %s, %d Services", once.Status, len(once.Services))
	}
	for i := range once.Services {
		a, b := once.Services[i], each.Services[i]
		a.DurationMs, b.DurationMs = 0, 0
		if !reflect.DeepEqual(a.Targets, b.Targets) || a.Status != b.Status || a.Desired != b.Desired {
			t.Errorf("%s from one read:\n%+v\nfrom its own:\n%+v", a.Service, a.Result, b.Result)
		}
	}

	// web03's endpoints change, and web10 (be_10, empty) is created.
	w.slice("web03-1", "web03", map[string]int32{"http": 22003}, endpoint{ip: "10.244.0.3", pod: "web03-c"})
	listen(t, "web03-c", "10.244.0.3", 22003)
	fw.annotated("web10", "be_10")
	w.slice("web10-1", "web10", map[string]int32{"http": 22010}, endpoint{ip: "10.244.0.1", pod: "web10-a"})
	listen(t, "web10-a", "10.244.0.1", 22010)
	res := settle(t, full)
	read, written = fw.drv.touched()
	if got := strings.Join(written, ","); got != "be_03,be_10" {
		t.Fatalf("wrote %v, want be_03 and be_10 alone (result %s)", written, res.Status)
	}
	if got := strings.Join(read, ","); got != "be_03,be_10" {
		t.Fatalf("read %v alone, want be_03 and be_10 (afresh before their writes)", read)
	}
	expectSpread(t, fw.h.Frontends["be_03"], "web03-c")
	expectSpread(t, fw.h.Frontends["be_10"], "web10-a")
	expectSpread(t, fw.h.Frontends["be_04"], "web04-a", "web04-b")
}
