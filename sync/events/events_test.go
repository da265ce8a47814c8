package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

func TestDescribe(t *testing.T) {
	tr := func(add, drain, del []string) reconcile.TargetResult {
		return reconcile.TargetResult{Target: "http://haproxy-a:5555", Backend: "be", Add: add, Drain: drain, Delete: del}
	}
	many := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, tt := range []struct {
		name                 string
		res                  reconcile.Result
		err                  error
		typ, reason, message string
	}{
		{"nothing changed: no event", reconcile.Result{Status: reconcile.StatusUnchanged, Targets: []reconcile.TargetResult{tr(nil, nil, nil)}}, nil, "", "", ""},
		{"a dry run: no event", reconcile.Result{Status: reconcile.StatusPlanned, Targets: []reconcile.TargetResult{tr([]string{"x"}, nil, nil)}}, nil, "", "", ""},
		{"added", reconcile.Result{Status: reconcile.StatusApplied, Targets: []reconcile.TargetResult{tr([]string{"web-1", "web-2"}, nil, nil)}}, nil,
			"Normal", ReasonAdded, "http://haproxy-a:5555 be: added 2 (web-1 web-2)"},
		{"drained on one target, removed on another: mixed", reconcile.Result{Status: reconcile.StatusApplied, Targets: []reconcile.TargetResult{
			tr(nil, []string{"web-1"}, nil), {Target: "unix:///b.sock", Backend: "be", Delete: []string{"web-0"}}}}, nil,
			"Normal", ReasonChanged, "http://haproxy-a:5555 be: drained 1 (web-1); unix:///b.sock be: removed 1 (web-0)"},
		{"long lists are cut", reconcile.Result{Status: reconcile.StatusApplied, Targets: []reconcile.TargetResult{tr(nil, nil, many)}}, nil,
			"Normal", ReasonRemoved, "http://haproxy-a:5555 be: removed 7 (a b c d e +2 more)"},
		{"a failure: warning with each target's error", reconcile.Result{Status: reconcile.StatusError, Targets: []reconcile.TargetResult{
			{Target: "http://haproxy-a:5555", Backend: "be", Error: "connection refused"}}}, fmt.Errorf("%w: 1 of 1", reconcile.ErrTargets),
			"Warning", ReasonFailed, "haproxy target failed: 1 of 1: http://haproxy-a:5555 be: connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			typ, reason, message, ok := Describe(tt.res, tt.err)
			if ok != (tt.typ != "") || typ != tt.typ || reason != tt.reason || message != tt.message {
				t.Errorf("got %v %q %q %q, want %q %q %q", ok, typ, reason, message, tt.typ, tt.reason, tt.message)
			}
		})
	}
}

// sink keeps Events in memory, as the API server would.
type sink struct {
	events          map[string]*corev1.Event
	creates, patchs int
}

func (s *sink) CreateEvent(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	if s.events == nil {
		s.events = map[string]*corev1.Event{}
	}
	if _, ok := s.events[ev.Name]; ok {
		return nil, fmt.Errorf("%s exists", ev.Name)
	}
	s.creates++
	c := ev.DeepCopy()
	s.events[ev.Name] = c
	return c, nil
}

func (s *sink) PatchEvent(_ context.Context, _, name string, count int32, last metav1.Time, message string) (*corev1.Event, error) {
	ev, ok := s.events[name]
	if !ok {
		return nil, errors.New("not found")
	}
	s.patchs++
	ev.Count, ev.LastTimestamp, ev.Message = count, last, message
	return ev, nil
}

// recorder with a clock the test moves.
func recorder() (*Recorder, *sink, *time.Time) {
	s := &sink{}
	r := New(s, "ns", "web", "pod-1", nil)
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	return r, s, &now
}

func (r *Recorder) record(t *testing.T, res reconcile.Result, err error) {
	t.Helper()
	typ, reason, message, ok := Describe(res, err)
	if !ok {
		return
	}
	if err := r.write(context.Background(), event{uid: res.ServiceUID, typ: typ, reason: reason, message: message, at: r.now()}); err != nil {
		t.Fatal(err)
	}
}

func added(names ...string) reconcile.Result {
	return reconcile.Result{Status: reconcile.StatusApplied, ServiceUID: "uid-1",
		Targets: []reconcile.TargetResult{{Target: "t", Backend: "be", Add: names}}}
}

// TestRepeatsRaiseTheCount: the same Event again patches its count; the
// Event names the Service with its UID, so `kubectl describe svc` finds it.
func TestRepeatsRaiseTheCount(t *testing.T) {
	r, s, now := recorder()
	for range 3 {
		r.record(t, reconcile.Result{Status: reconcile.StatusError}, errors.New("read kubernetes: connection refused"))
		*now = now.Add(time.Second)
	}
	if s.creates != 1 || s.patchs != 2 || len(s.events) != 1 {
		t.Fatalf("creates %d, patches %d, events %d; want one Event written once and patched twice", s.creates, s.patchs, len(s.events))
	}
	for _, ev := range s.events {
		if ev.Count != 3 || ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonFailed || ev.InvolvedObject.Kind != "Service" ||
			ev.InvolvedObject.Name != "web" || ev.Source.Component != "haproxy-k8s-sync" || !ev.LastTimestamp.After(ev.FirstTimestamp.Time) {
			t.Errorf("event %+v", ev)
		}
	}
	r.record(t, added("web-1"), nil)
	for _, ev := range s.events {
		if ev.Reason == ReasonAdded && ev.InvolvedObject.UID != "uid-1" {
			t.Errorf("the Event names the Service's UID %q, want uid-1", ev.InvolvedObject.UID)
		}
	}
}

// TestSimilarEventsAreCombined: past 10 similar Events (same reason, other
// servers) in 10 minutes, the next ones fold into one combined Event.
func TestSimilarEventsAreCombined(t *testing.T) {
	r, s, now := recorder()
	for i := range 20 {
		r.record(t, added(fmt.Sprintf("web-%d", i)), nil)
		*now = now.Add(10 * time.Second)
	}
	combined := 0
	for _, ev := range s.events {
		if strings.HasPrefix(ev.Message, "(combined from similar events): ") {
			combined++
			if ev.Count != 10 || !strings.Contains(ev.Message, "web-19") {
				t.Errorf("combined event: count %d, message %q; want 10, the newest message", ev.Count, ev.Message)
			}
		}
	}
	if len(s.events) != 11 || combined != 1 {
		t.Errorf("%d events, %d combined; want 10 plain and 1 combined", len(s.events), combined)
	}
}

// TestFlappingIsBounded: an endpoint flapping a thousand times writes 25
// Events at most, then one per 5 minutes.
func TestFlappingIsBounded(t *testing.T) {
	r, s, now := recorder()
	var dropped int
	r.OnWrite = func(op string) {
		if op == "dropped" {
			dropped++
		}
	}
	for i := range 1000 {
		res := added("web-1")
		if i%2 == 1 {
			res = reconcile.Result{Status: reconcile.StatusApplied, Targets: []reconcile.TargetResult{{Target: "t", Backend: "be", Drain: []string{"web-1"}}}}
		}
		r.record(t, res, nil)
		*now = now.Add(100 * time.Millisecond)
	}
	if w := s.creates + s.patchs; w != burst || dropped != 1000-burst {
		t.Errorf("%d writes, %d dropped; want %d writes", w, dropped, burst)
	}
	*now = now.Add(refill)
	r.record(t, added("web-1"), nil)
	if w := s.creates + s.patchs; w != burst+1 {
		t.Errorf("after 5 minutes: %d writes, want one more", w)
	}
}

// TestObserveNeverBlocks: with nobody writing, a full queue drops.
func TestObserveNeverBlocks(t *testing.T) {
	r, _, _ := recorder()
	done := make(chan struct{})
	go func() {
		for range 2 * queueLen {
			r.Observe(added("web-1"), nil)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe blocked")
	}
}

// TestMisconfigurationEvents: what a reconcile's warnings call for. A
// warning is a Misconfigured Event, instead of the SyncFailed one when it is
// why Kubernetes could not be used, beside the change Event when servers
// changed; a Service not found gets none; a missing nodePort is left to the
// log and the result.
func TestMisconfigurationEvents(t *testing.T) {
	noPort := desired.Warning{Reason: desired.WarnServicePortNotFound, Message: `Service ns/web has no port "http"`}
	noSlice := desired.Warning{Reason: desired.WarnNoEndpointSlices, Message: "no EndpointSlice in namespace ns carries the label"}
	noNodePort := desired.Warning{Reason: desired.WarnNoNodePort, Message: "no nodePort"}
	missing := desired.Warning{Reason: desired.WarnServiceNotFound, Message: "Service ns/web not found"}
	parked := reconcile.Result{Status: reconcile.StatusApplied, Warnings: []desired.Warning{noSlice},
		Targets: []reconcile.TargetResult{{Target: "t", Backend: "be", Maint: []string{"node-a"}}}}
	for _, tt := range []struct {
		name string
		res  reconcile.Result
		err  error
		want []string // reason: message
	}{
		{"a port not found: the warning, not SyncFailed", reconcile.Result{Status: reconcile.StatusError, Warnings: []desired.Warning{noPort}},
			errors.New(`desired state: Service ns/web has no port "http"`), []string{`Misconfigured: Service ns/web has no port "http"`}},
		{"no slice: the warning and the servers parked", parked, nil,
			[]string{"Misconfigured: " + noSlice.Message, "ServersDrained: t be: put in maintenance 1 (node-a)"}},
		{"a target failed beside: both", reconcile.Result{Status: reconcile.StatusError, Warnings: []desired.Warning{noSlice},
			Targets: []reconcile.TargetResult{{Target: "t", Backend: "be", Error: "refused"}}}, fmt.Errorf("%w: 1 of 1", reconcile.ErrTargets),
			[]string{"Misconfigured: " + noSlice.Message, "SyncFailed: haproxy target failed: 1 of 1: t be: refused"}},
		{"no Service: no Event", reconcile.Result{Status: reconcile.StatusError, Warnings: []desired.Warning{missing}},
			errors.New("read kubernetes: get service ns/web: service not found"), nil},
		{"no nodePort alone: no Event", reconcile.Result{Status: reconcile.StatusUnchanged, Warnings: []desired.Warning{noNodePort}}, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _, _ := recorder()
			r.Observe(tt.res, tt.err)
			var got []string
			for len(r.queue) > 0 {
				ev := <-r.queue
				got = append(got, ev.reason+": "+ev.message)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("events %q\nwant %q", got, tt.want)
			}
		})
	}
}
