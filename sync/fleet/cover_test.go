package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
)

// A lane reconcile that waits for a slot when a full reconcile begins is
// answered by the full reconcile's part for its Service, without reading
// or writing that Service again: after a mass entry, 2,000 lane runs
// queued so held a full reconcile past the handler's 62 s wait (503). A
// lane run that began after the full reconcile is no part of it: it waits
// for its slot and reconciles.
func TestFullAnswersTheLaneRunsWaitingForASlot(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	c.add(annotatedSvc("apps", "api", "be_api"), "127.0.2.1")
	h := newMem("h", "be_web", "be_api")
	poked := make(chan string, 10)
	l := &Lanes{Fleet: newFleet(c, h), OnPoked: func(key string, _ reconcile.Result, _ error) { poked <- key }}
	defer l.Close()
	l.init()
	for range Concurrency {
		l.sem <- struct{}{} // every slot taken
	}
	reads := func() int { h.mu.Lock(); defer h.mu.Unlock(); return h.reads["be_web"] }

	l.Poke("apps/web")
	eventually(t, "the lane's run waits for a slot", waiting(l, "apps/web", 1))
	if res, err := l.Full(context.Background()); err != nil || len(res.Services) != 2 {
		t.Fatalf("full reconcile: %v %+v", err, res)
	}
	if !allIn(h, "be_web", model.Ready)() {
		t.Fatalf("be_web %v after the full reconcile", h.states("be_web"))
	}
	after := reads()
	select {
	case k := <-poked:
		if k != "apps/web" {
			t.Fatalf("poked %s", k)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the lane's run waiting for a slot was not answered by the full reconcile")
	}
	if reads() != after {
		t.Fatalf("the answered lane run read be_web again (%d reads, %d after the full reconcile)", reads(), after)
	}

	l.Poke("apps/web") // after the full reconcile: its own
	select {
	case <-poked:
		t.Fatal("a lane run that began after the full reconcile was answered by it")
	case <-time.After(200 * time.Millisecond):
	}
	for range Concurrency {
		<-l.sem
	}
	select {
	case <-poked:
	case <-time.After(2 * time.Second):
		t.Fatal("the lane's own run did not end once slots were free")
	}
	if reads() == after {
		t.Fatal("the lane's own run did not read be_web")
	}
}

// waiting says whether n runs of key's lane wait for a slot.
func waiting(l *Lanes, key string, n int) func() bool {
	return func() bool {
		ln := l.existing(key)
		if ln == nil {
			return false
		}
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return len(ln.waiters) == n
	}
}

// Every run of a lane waiting for a slot is answered, not only one: with
// an HA pair's two sockets, a Service's own run and a run per target whose
// check passed wait side by side (reconcile.Coalescer's target lanes).
func TestFullAnswersEveryWaitingRunOfALane(t *testing.T) {
	c := &cluster{}
	c.add(annotatedSvc("apps", "web", "be_web"), "127.0.1.1")
	h := newMem("h", "be_web")
	l := &Lanes{Fleet: newFleet(c, h)}
	defer l.Close()
	l.init()
	for range Concurrency {
		l.sem <- struct{}{}
	}
	defer func() {
		for range Concurrency {
			<-l.sem
		}
	}()
	ln := l.lane("apps/web")
	ended := make(chan error, 2)
	for range 2 {
		go func() { _, err := l.run(context.Background(), ln); ended <- err }()
	}
	eventually(t, "two runs wait for a slot", waiting(l, "apps/web", 2))
	if _, err := l.Full(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-ended:
			if err != nil {
				t.Fatalf("answered run: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a run waiting for a slot was not answered by the full reconcile")
		}
	}
	if ln.answeredBy(0) || !ln.answeredBy(l.turn.Load()) {
		t.Fatalf("the full reconcile's turn %d is not marked as the one that answered (%d)", l.turn.Load(), ln.used)
	}
}
