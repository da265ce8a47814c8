package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/services"
)

// clock runs no timer by itself: the test moves it (advance), and the
// follow-ups' timers due fire then, in order.
type clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	at   time.Time
	f    func()
	done bool
}

func (c *clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var due *timer
		for _, t := range c.timers {
			if !t.done && !t.at.After(c.now) && (due == nil || t.at.Before(due.at)) {
				due = t
			}
		}
		if due != nil {
			due.done = true
		}
		c.mu.Unlock()
		if due == nil {
			return
		}
		due.f()
	}
}

// clocked returns Lanes over f whose follow-ups run on c: nothing is
// followed up but when the test moves the clock. Left backends handed over
// again arrive on the channel, as the watch's queue would get them.
func clocked(f *Fleet, c *clock) (*Lanes, chan []string, chan string) {
	again, poked := make(chan []string, 16), make(chan string, 16)
	l := &Lanes{Fleet: f, Tune: func(fu *reconcile.FollowUp) { fu.AfterFunc, fu.Now = c.AfterFunc, c.Now }}
	l.LeftAgain = func(b []string) { again <- b }
	l.OnPoked = func(key string, _ reconcile.Result, _ error) { poked <- key }
	return l, again, poked
}

// receive is what the follow-up handed over; a test fails when nothing
// came (a bound against a hang, not a timing assertion: the clock fired
// synchronously already).
func receive[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("never: %s", what)
		panic("unreachable")
	}
}

func nothing[T any](t *testing.T, ch chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: %v", what, v)
	default:
	}
}

// TestLeftServersGoToTheEnd (issue 54 row 7): a deleted Service's servers
// are parked by the reconcile of its left backend, then deleted by the
// follow-up's next one (which reads the Services again), with no POST; a
// full reconcile's draining class backends are followed up alike. Before,
// they stayed parked for ever: zero endpoints delete nothing, and a full
// reconcile followed up no left backend.
func TestLeftServersGoToTheEnd(t *testing.T) {
	for _, tt := range []struct {
		name string
		full bool // the backend is found by a full reconcile (class, draining), not handed over by the watch
	}{{"handed over by the watch", false}, {"draining class backend of a full reconcile", true}} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cluster{}
			c.add(annotatedSvc("apps", "stay", "be_stay"), "127.0.1.9")
			h := newMem("h", "be_stay", "be_gone")
			h.backends["be_gone"]["old-1"] = model.Server{Name: "old-1", Address: "127.0.3.1", Port: 80, State: model.Ready, Weight: 1}
			h.backends["be_gone"]["old-2"] = model.Server{Name: "old-2", Address: "127.0.3.2", Port: 80, State: model.Ready, Weight: 1}
			f := newFleet(c, h)
			fe := &fakeFrontends{report: services.FrontendReport{Ready: map[string]bool{}}}
			if tt.full {
				fe.report.Draining = []string{"be_gone"}
				f.Frontends = fe
			}
			clk := &clock{now: time.Unix(0, 0)}
			l, again, _ := clocked(f, clk)
			defer l.Close()
			if _, err := l.Full(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !tt.full {
				if st := h.states("be_gone"); st["old-1"] != model.Ready {
					t.Fatalf("be_gone %v: touched before it was handed over", st)
				}
				if _, err := l.Left(context.Background(), []string{"be_gone"}); err != nil {
					t.Fatal(err)
				}
			}
			if st := h.states("be_gone"); len(st) != 2 || st["old-1"] != model.Maint || st["old-2"] != model.Maint {
				t.Fatalf("be_gone %v: want both servers parked, none deleted on one read", st)
			}
			clk.advance(time.Second)
			var b []string
			select { // the clock fired the follow-up's timer, which hands over at once
			case b = <-again:
			default:
				t.Fatal("the left backend was not handed over again after the parking")
			}
			if len(b) != 1 || b[0] != "be_gone" {
				t.Fatalf("handed over %v", b)
			}
			if _, err := l.Left(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			if st := h.states("be_gone"); len(st) != 0 {
				t.Fatalf("be_gone %v after the confirming reconcile: want its servers deleted", st)
			}
			clk.advance(time.Minute)
			nothing(t, again, "handed over again with nothing left to do")
			if st := h.states("be_stay"); len(st) != 1 || st["127-0-1-9"] != model.Ready {
				t.Fatalf("be_stay %v: another Service's backend touched", st)
			}
		})
	}
}

// TestClaimantsLaneFinishesTheHandOver (issue 54 row 7): a Service refused
// for a backend another holds gets it once the holder is deleted (the
// watch hands the backend over as left); the holder's server, parked by
// the guard until the claimant's is UP, is deleted by the claimant's lane's
// follow-up, with no POST and no change in Kubernetes. Before, nothing
// followed that reconcile up: parked until a full one.
func TestClaimantsLaneFinishesTheHandOver(t *testing.T) {
	c := &cluster{}
	web := annotatedSvc("apps", "web", "be_x")
	web.CreationTimestamp = metav1.NewTime(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	c.add(web, "127.0.1.1")
	h := newMem("h", "be_x")
	f := newFleet(c, h)
	clk := &clock{now: time.Unix(0, 0)}
	l, _, poked := clocked(f, clk)
	defer l.Close()
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	claim := annotatedSvc("apps", "claim", "be_x")
	claim.CreationTimestamp = metav1.NewTime(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	c.add(claim, "127.0.2.1")
	if res, err := l.Full(context.Background()); err != nil || len(res.Refused) != 1 || res.Refused[0].Service != "apps/claim" {
		t.Fatalf("%v %+v: want apps/claim refused", err, res.Refused)
	}
	c.mu.Lock()
	c.svcs = []corev1.Service{c.svcs[1]} // the holder is deleted
	c.mu.Unlock()
	res, err := l.Left(context.Background(), []string{"be_x"})
	if err != nil || len(res.Services) != 1 || res.Services[0].Service != "apps/claim" {
		t.Fatalf("%v %+v: want apps/claim reconciled for be_x", err, res)
	}
	if st := h.states("be_x"); st["127-0-1-1"] != model.Maint || st["127-0-2-1"] != model.Ready {
		t.Fatalf("be_x %v: want the holder's server parked by the guard, the claimant's added", st)
	}
	clk.advance(time.Second)
	if k := receive(t, poked, "apps/claim's lane follows the hand-over up"); k != "apps/claim" {
		t.Fatalf("poked %s", k)
	}
	if st := h.states("be_x"); len(st) != 1 || st["127-0-2-1"] != model.Ready {
		t.Fatalf("be_x %v after the follow-up: want the holder's parked server deleted", st)
	}
}

// drainingFrontends stands for package lb over a memHAProxy: the owned
// class backends no Service wants drain, and go once they have no server
// (lb.Drained without a socket: sessions unknown).
type drainingFrontends struct {
	h          *memHAProxy
	owned      map[string]bool
	syncs      int
	failRemove int // the next removals that fail (the Data Plane API answered 503)
}

func (d *drainingFrontends) Sync(_ context.Context, want []services.Selected, _ map[string]string) (services.FrontendReport, error) {
	d.syncs++
	rep := services.FrontendReport{Ready: map[string]bool{}}
	wanted := map[string]bool{}
	for _, s := range want {
		rep.Ready[s.Key()] = true
		for _, p := range s.Ports {
			wanted[p.Backend] = true
		}
	}
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	for b := range d.owned {
		if wanted[b] {
			continue
		}
		if len(d.h.backends[b]) > 0 {
			rep.Draining = append(rep.Draining, b)
			continue
		}
		if d.failRemove > 0 {
			d.failRemove--
			rep.Draining = append(rep.Draining, b) // still there, as package lb says it
			continue
		}
		delete(d.h.backends, b)
		delete(d.owned, b)
		rep.Removed = append(rep.Removed, "fe"+b[2:])
	}
	return rep, nil
}

// TestLeftClassSectionsGoWithoutAFullReconcile (issue 54 row 7): a class
// Service deleted: the watch hands its backend over, one reconcile parks
// its server, the follow-up's next deletes it and has its frontend and
// backend removed, with no full reconcile; a class backend already gone is
// not reconciled again (it would fail, and be retried, for ever).
func TestLeftClassSectionsGoWithoutAFullReconcile(t *testing.T) {
	c := &cluster{}
	cls := "lb"
	c.add(corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	h := newMem("h", be)
	fe := &drainingFrontends{h: h, owned: map[string]bool{be: true}}
	f := newFleet(c, h)
	f.Frontends = fe
	clk := &clock{now: time.Unix(0, 0)}
	l, again, _ := clocked(f, clk)
	defer l.Close()
	if _, err := l.Full(context.Background()); err != nil || len(h.states(be)) != 1 {
		t.Fatalf("%v, %s %v: want web's server", err, be, h.states(be))
	}
	c.mu.Lock()
	c.svcs = nil // deleted
	c.mu.Unlock()
	if _, err := l.Left(context.Background(), []string{be}); err != nil {
		t.Fatal(err)
	}
	if st := h.states(be); len(st) != 1 || st["127-0-1-1"] != model.Maint {
		t.Fatalf("%s %v: want its server parked", be, st)
	}
	clk.advance(time.Second)
	var b []string
	select {
	case b = <-again:
	default:
		t.Fatal("not handed over again after the parking")
	}
	res, err := l.Left(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	_, still := h.backends[be]
	h.mu.Unlock()
	if still {
		t.Fatalf("%s still there after its server was deleted: %+v; want its sections removed by this reconcile", be, res.Frontends)
	}
	syncs := fe.syncs
	if res, err := l.Left(context.Background(), []string{be}); err != nil || len(res.Left) != 0 || fe.syncs != syncs+1 {
		t.Fatalf("a class backend gone, handed over again: %v %+v; want nothing reconciled", err, res)
	}
}

// TestParkedServersOfADeletedServiceWaitForASecondRead (a second reader):
// a Service that lost every endpoint (its servers parked, as zero
// endpoints park them) and is then deleted: the first read that finds its
// backend left deletes nothing, though every server is parked and free;
// the follow-up's second read, which finds it left again, deletes them.
// Before, the first read deleted them: one read of Kubernetes (a Service
// deleted and created again by a GitOps sync) was enough.
func TestParkedServersOfADeletedServiceWaitForASecondRead(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "stay", "be_stay"), "127.0.1.9")
	h := newMem("h", "be_stay", "be_gone")
	h.backends["be_gone"]["old-1"] = model.Server{Name: "old-1", Address: "127.0.3.1", Port: 80, State: model.Maint, Weight: 1}
	f := newFleet(c, h)
	clk := &clock{now: time.Unix(0, 0)}
	l, again, _ := clocked(f, clk)
	defer l.Close()
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := l.Left(context.Background(), []string{"be_gone"})
	if err != nil {
		t.Fatal(err)
	}
	if st := h.states("be_gone"); len(st) != 1 || st["old-1"] != model.Maint {
		t.Fatalf("be_gone %v after the first read that finds it left (%+v): want its parked server kept", st, res.Left)
	}
	clk.advance(time.Second)
	b := receive(t, again, "the left backend handed over again for its second read")
	if _, err := l.Left(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if st := h.states("be_gone"); len(st) != 0 {
		t.Fatalf("be_gone %v after the second read: want its server deleted", st)
	}
	clk.advance(time.Minute)
	nothing(t, again, "handed over again with nothing left to do")
}

// TestFailedRemovalOfALeftClassSectionIsFollowedUp (a second reader): a
// deleted class Service's server is deleted by the follow-up's reconcile,
// but the removal of its frontend and backend that comes next fails (the
// Data Plane API answered 503): that left backend's result fails, so the
// follow-up comes back and removes them. Before, the failure was dropped:
// the sections stayed until a full reconcile, which nothing may ask for.
func TestFailedRemovalOfALeftClassSectionIsFollowedUp(t *testing.T) {
	c := &cluster{}
	cls := "lb"
	c.add(corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, "127.0.1.1")
	_, be := services.ClassNames("", "apps", "web", 80)
	h := newMem("h", be)
	fe := &drainingFrontends{h: h, owned: map[string]bool{be: true}}
	f := newFleet(c, h)
	f.Frontends = fe
	clk := &clock{now: time.Unix(0, 0)}
	l, again, _ := clocked(f, clk)
	defer l.Close()
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.svcs = nil // deleted
	c.mu.Unlock()
	if _, err := l.Left(context.Background(), []string{be}); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	fe.failRemove = 1
	res, _ := l.Left(context.Background(), receive(t, again, "handed over for the confirming read"))
	if st := h.states(be); len(st) != 0 {
		t.Fatalf("%s %v: want its server deleted", be, st)
	}
	if len(res.Left) != 1 || res.Left[0].Status != reconcile.StatusError {
		t.Fatalf("left %+v: want the left backend failed while its sections stay", res.Left)
	}
	clk.advance(time.Minute)
	if _, err := l.Left(context.Background(), receive(t, again, "handed over again after the failed removal")); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	_, still := h.backends[be]
	h.mu.Unlock()
	if still {
		t.Fatalf("%s still there after the follow-up", be)
	}
}
