package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

func TestChangedNotices(t *testing.T) {
	a := notice{key: "n/a", reason: ReasonRefused, message: "x"}
	a2 := notice{key: "n/a", reason: ReasonRefused, message: "y"}
	b := notice{key: "n/b", reason: ReasonRefused, message: "x"}
	for _, tc := range []struct {
		name        string
		before, now map[string][]notice
		want        []notice
	}{
		{"first time", nil, map[string][]notice{"n/a": {a}}, []notice{a}},
		{"lasting: told once", map[string][]notice{"n/a": {a}}, map[string][]notice{"n/a": {a}}, nil},
		{"changed", map[string][]notice{"n/a": {a}}, map[string][]notice{"n/a": {a2}}, []notice{a2}},
		// A second warning on the same Service: both are told again, so the
		// Events say the whole of it.
		{"one more", map[string][]notice{"n/a": {a}}, map[string][]notice{"n/a": {a, a2}}, []notice{a, a2}},
		{"ended", map[string][]notice{"n/a": {a}}, map[string][]notice{}, nil},
		{"another service", map[string][]notice{"n/a": {a}}, map[string][]notice{"n/a": {a}, "n/b": {b}}, []notice{b}},
	} {
		if got := changedNotices(tc.before, tc.now); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

type told struct {
	mu  sync.Mutex
	got []string
}

func (w *told) warn(svc *corev1.Service, reason, message string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, fmt.Sprintf("%s/%s uid=%s %s: %s", svc.Namespace, svc.Name, svc.UID, reason, message))
}

func (w *told) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	slices.Sort(out)
	return out
}

// TestWarnOncePerRefusal: a backend named by two Services warns the one
// refused, naming the holder, and a class Service whose frontends failed is warned;
// once each while it lasts, again when it ended and came back.
func TestWarnOncePerRefusal(t *testing.T) {
	c := &cluster{}
	one, two := annotatedSvc("apps", "one", "be_dup"), annotatedSvc("apps", "two", "be_dup")
	one.UID, two.UID = "u1", "u2"
	c.add(one, "127.0.1.1")
	c.add(two, "127.0.1.2")
	cls := "lb"
	c.add(corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", UID: "u3"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Port: 80}}}}, "127.0.1.3")
	_, beWeb := services.ClassNames("", "apps", "web", 80)
	h := newMem("h", "be_dup", beWeb)
	fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{}, Failed: map[string]string{"apps/web": "address held by fe_x"}}}
	f := newFleet(c, h)
	f.Frontends = fe
	w := &told{}
	f.Warn = w.warn
	_, _ = f.Reconcile(context.Background(), false)
	got := w.take()
	want := []string{
		"apps/two uid=u2 Refused: backend be_dup is held by apps/one",
		"apps/web uid=u3 FrontendFailed: frontends: address held by fe_x",
	}
	if len(got) != len(want) {
		t.Fatalf("told %q, want %d warnings", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("told %q, want it to start %q", got[i], want[i])
		}
	}
	for range 2 {
		_, _ = f.Reconcile(context.Background(), false)
		_, _ = f.ReconcileService(context.Background(), "apps/web", false)
	}
	if got := w.take(); len(got) != 0 {
		t.Fatalf("told again while it lasts: %q", got)
	}
	// The frontend is made, then fails again: told again.
	fe.report.Failed = nil
	_, _ = f.Reconcile(context.Background(), false)
	fe.report.Failed = map[string]string{"apps/web": "address held by fe_x"}
	_, _ = f.Reconcile(context.Background(), false)
	if got := w.take(); len(got) != 1 || !strings.Contains(got[0], "FrontendFailed") {
		t.Fatalf("told %q, want the frontend failure once more", got)
	}
}
