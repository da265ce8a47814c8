package watch

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
)

// BenchmarkNodeHeartbeats measures what one kubelet status update costs the
// Node watch: decoding the Node from the wire (protobuf, as the service asks
// for, and JSON for comparison) and deciding it changes nothing. A 5,000-Node cluster whose kubelets
// each update once per 5 minutes sends 16.7 such events per second; the
// benchmark reports the share of one core that takes
// ("%core@5000nodes/5min"; the target is < 5).
func BenchmarkNodeHeartbeats(b *testing.B) {
	for _, enc := range []struct {
		name  string
		codec runtime.Serializer
	}{
		{"protobuf", protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)},
		{"json", kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, kjson.SerializerOptions{})},
	} {
		b.Run(enc.name, func(b *testing.B) {
			const nodes = 5000
			f := &NodeFilter{}
			f.reset()
			// Each Node's next status update: only heartbeats and the version move.
			wire := make([][]byte, 0, 100)
			for i := range 100 {
				n := desiredtest.RealisticNode(fmt.Sprintf("node-%04d", i), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
				f.listed(n)
				n.ResourceVersion = "2"
				for j := range n.Status.Conditions {
					n.Status.Conditions[j].LastHeartbeatTime = metav1.NewTime(time.Date(2026, 11, 1, 12, 5, 0, 0, time.UTC))
				}
				n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
				data, err := runtime.Encode(enc.codec, n)
				if err != nil {
					b.Fatal(err)
				}
				wire = append(wire, data)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				obj, _, err := enc.codec.Decode(wire[i%len(wire)], nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				if f.matters(watch.Event{Type: watch.Modified, Object: obj}) {
					b.Fatal("a heartbeat mattered")
				}
			}
			perEvent := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(len(wire[0])), "bytes/event")
			b.ReportMetric(perEvent*nodes/300*100, "%core@5000nodes/5min")
		})
	}
}
