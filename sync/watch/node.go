package watch

import (
	"hash/maphash"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// AnnotationPrefix is the prefix of this project's Node annotations; a change
// of any of them can matter.
const AnnotationPrefix = "haproxy-k8s-sync.io/"

// NodeFilter tells Node events that can change a server from the kubelet's
// status heartbeats, which change nothing that matters. It keeps one
// fingerprint per Node (about 50 bytes each: 250 KB for 5,000 Nodes) and
// decides from the event and that fingerprint alone. Use it from one
// goroutine.
type NodeFilter struct {
	seed   maphash.Seed
	prints map[string]uint64
}

func (f *NodeFilter) init() {
	if f.prints == nil {
		f.seed = maphash.MakeSeed()
		f.prints = map[string]uint64{}
	}
}

func (f *NodeFilter) reset() {
	f.init()
	clear(f.prints)
}

func (f *NodeFilter) listed(obj runtime.Object) {
	if n, ok := obj.(*corev1.Node); ok {
		f.prints[n.Name] = f.Fingerprint(n)
	}
}

// matters records ev and reports whether it can change the desired state: a
// Node that appears (an endpoint may have waited for it), goes, or changes a
// fingerprinted field.
func (f *NodeFilter) matters(ev watch.Event) bool {
	f.init()
	n, ok := ev.Object.(*corev1.Node)
	if !ok {
		return true
	}
	switch ev.Type {
	case watch.Deleted:
		delete(f.prints, n.Name)
		return true
	case watch.Added, watch.Modified:
		fp := f.Fingerprint(n)
		old, known := f.prints[n.Name]
		f.prints[n.Name] = fp
		return !known || old != fp
	default:
		return false
	}
}

// Fingerprint hashes the fields of n that can change a server: its
// addresses, the status of its Ready condition, spec.unschedulable, its
// taints, its labels and this project's annotations. Heartbeat times, images,
// capacity and other conditions are left out.
func (f *NodeFilter) Fingerprint(n *corev1.Node) uint64 {
	f.init()
	var h maphash.Hash
	h.SetSeed(f.seed)
	for _, a := range n.Status.Addresses {
		h.WriteString(string(a.Type))
		h.WriteByte(0)
		h.WriteString(a.Address)
		h.WriteByte(0)
	}
	h.WriteByte(1)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			h.WriteString(string(c.Status))
		}
	}
	h.WriteByte(1)
	if n.Spec.Unschedulable {
		h.WriteByte(2)
	}
	for _, t := range n.Spec.Taints {
		h.WriteString(t.Key)
		h.WriteByte(0)
		h.WriteString(t.Value)
		h.WriteByte(0)
		h.WriteString(string(t.Effect))
		h.WriteByte(0)
	}
	sum := h.Sum64()
	// Maps have no order: combine per-entry hashes with a commutative sum.
	sum += mapHash(f.seed, n.Labels, "")
	sum += 3 * mapHash(f.seed, n.Annotations, AnnotationPrefix)
	return sum
}

// mapHash hashes the entries of m whose keys start with prefix, in any order.
func mapHash(seed maphash.Seed, m map[string]string, prefix string) uint64 {
	var sum uint64
	for k, v := range m {
		if prefix != "" && !strings.HasPrefix(k, prefix) {
			continue
		}
		// Two different hashes of key and value, so k=v and v=k differ.
		sum += maphash.String(seed, k)*0x9e3779b97f4a7c15 ^ maphash.String(seed, v)
	}
	return sum
}
