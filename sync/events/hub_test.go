package events

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lockedSink is sink, safe for the Hub's writer and the test's reads.
type lockedSink struct {
	mu sync.Mutex
	s  sink
}

func (l *lockedSink) CreateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.CreateEvent(ctx, ev)
}

func (l *lockedSink) PatchEvent(ctx context.Context, ns, name string, count int32, last metav1.Time, message string) (*corev1.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.PatchEvent(ctx, ns, name, count, last, message)
}

func (l *lockedSink) snapshot() (events []corev1.Event, patches int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.s.events {
		events = append(events, *ev)
	}
	return events, l.s.patchs
}

// TestHubWritesEachServicesEvents: one writer serves every Service's
// Recorder; each Event is on its own Service (namespace, name, UID), and a
// repeated warning raises its Event's count, per Service.
func TestHubWritesEachServicesEvents(t *testing.T) {
	s := &lockedSink{}
	h := NewHub(s, "pod-1", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	if h.For("a", "one") != h.For("a", "one") || h.For("a", "one") == h.For("b", "one") {
		t.Fatal("For must give one Recorder per Service")
	}
	h.For("a", "one").Warn("u1", "Refused", "backend be_x is also named by b/one")
	h.For("b", "one").Warn("u2", "Refused", "backend be_x is also named by a/one")
	deadline := time.Now().Add(5 * time.Second)
	var evs []corev1.Event
	for time.Now().Before(deadline) {
		if evs, _ = s.snapshot(); len(evs) == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events written, want 2", len(evs))
	}
	for _, ev := range evs {
		o := ev.InvolvedObject
		want := map[string]string{"a": "u1", "b": "u2"}[ev.Namespace]
		if o.Kind != "Service" || o.Namespace != ev.Namespace || o.Name != "one" || string(o.UID) != want || ev.Type != corev1.EventTypeWarning || ev.Reason != "Refused" {
			t.Errorf("event %s/%s on %+v: %s %s %q", ev.Namespace, ev.Name, o, ev.Type, ev.Reason, ev.Message)
		}
	}
	h.For("a", "one").Warn("u1", "Refused", "backend be_x is also named by b/one")
	for time.Now().Before(deadline) {
		if _, p := s.snapshot(); p == 1 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the repeated warning was not folded into its Event's count")
}
