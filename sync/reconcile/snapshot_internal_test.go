package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

type fixedDriver struct{ servers []model.Server }

func (d *fixedDriver) Name() string { return "mem" }
func (d *fixedDriver) Read(context.Context, string) (model.Backend, error) {
	return model.Backend{Name: "be", Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Servers: d.servers}, nil
}
func (d *fixedDriver) Apply(context.Context, plan.Plan) (plan.Applied, error) {
	return plan.Applied{}, nil
}
func (d *fixedDriver) Policy() plan.Policy { return plan.Policy{} }

// TestSnapshotKeepsTheRefusedMemory (a second reader): a snapshot's no-op
// plan may be older than an apply whose refusals the Reconciler remembers
// (plan.Policy.Refused): it must not forget them, as a fresh reconcile,
// which plans the refused add again, does not.
func TestSnapshotKeepsTheRefusedMemory(t *testing.T) {
	old := desiredtest.PodCluster("ingress", "web", "10.244.0.1")
	r := &Reconciler{
		Source: &desiredtest.Source{In: desiredtest.PodCluster("ingress", "web", "10.244.0.1", "10.244.0.2")},
		Options: desired.Options{Mode: desired.PodMode, Backends: []desired.PortBackend{{Backend: "be"}},
			Settings: model.Settings{Balance: "roundrobin", TCPCheck: true}, Check: model.Check{Inter: 5 * time.Second, Rise: 2, Fall: 2}},
		Timeout: 2 * time.Second,
		Backoff: func() retry.Backoff { return retry.NewConstant(time.Millisecond) },
	}
	want, _, err := desired.Compute(old, r.Options)
	if err != nil {
		t.Fatal(err)
	}
	d := &fixedDriver{servers: want[0].Servers}
	r.Targets = []Driver{d}
	r.refused.Store("mem\x00be", []string{"10-244-0-2"})
	snap := &Snapshot{ReadAt: time.Now(), Input: old, Backend: func(string, string) (model.Backend, bool) {
		b, _ := d.Read(context.Background(), "be")
		return b, true
	}}
	res, err := r.Reconcile(WithSnapshot(context.Background(), snap), false)
	if err != nil || res.Status != StatusUnchanged {
		t.Fatalf("from the snapshot: %v %s", err, res.Status)
	}
	if _, ok := r.refused.Load("mem\x00be"); !ok {
		t.Error("the snapshot's no-op forgot the refused servers")
	}
}
