package watch

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// runs records a Queue's runs; a run of a key in block waits for release.
type runs struct {
	mu      sync.Mutex
	got     []string
	left    [][]string
	now     map[string]int // running now, per key
	most    int            // most runs at once
	block   map[string]chan struct{}
	started chan string
}

func newRuns() *runs {
	return &runs{now: map[string]int{}, block: map[string]chan struct{}{}, started: make(chan string, 100)}
}

func (r *runs) run(ctx context.Context, key string) {
	r.mu.Lock()
	r.got = append(r.got, key)
	r.now[key]++
	total := 0
	for _, n := range r.now {
		total += n
	}
	r.most = max(r.most, total)
	if r.now[key] > 1 {
		r.mu.Unlock()
		panic("one key ran twice at once: " + key)
	}
	ch := r.block[key]
	r.mu.Unlock()
	r.started <- key
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	r.now[key]--
	r.mu.Unlock()
}

func (r *runs) gone(_ context.Context, backends []string) {
	r.mu.Lock()
	r.left = append(r.left, backends)
	r.mu.Unlock()
	r.started <- "left"
}

func (r *runs) wait(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-r.started:
		if got != want {
			t.Fatalf("ran %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%q did not run", want)
	}
}

func (r *runs) quiet(t *testing.T) {
	t.Helper()
	select {
	case got := <-r.started:
		t.Fatalf("unexpected run of %q", got)
	case <-time.After(100 * time.Millisecond):
	}
}

func startQueue(t *testing.T, r *runs, lim QueueLimits) *Queue {
	t.Helper()
	q := NewQueue(r.run, r.gone, lim, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return q
}

func TestQueueBurstWhileRunningCostsOneMoreRun(t *testing.T) {
	r := newRuns()
	release := make(chan struct{})
	r.block["ns/web"] = release
	q := startQueue(t, r, QueueLimits{})
	q.Poke("ns/web")
	r.wait(t, "ns/web")
	for range 50 {
		q.Poke("ns/web")
	}
	r.quiet(t)
	r.mu.Lock()
	r.block["ns/web"] = nil
	r.mu.Unlock()
	close(release)
	r.wait(t, "ns/web")
	r.quiet(t)
	if len(r.got) != 2 {
		t.Errorf("runs %v, want 2", r.got)
	}
}

func TestQueueRunsKeysConcurrentlyUpToTheBound(t *testing.T) {
	r := newRuns()
	release := make(chan struct{})
	keys := []string{"a/s1", "a/s2", "b/s1", "b/s2", "c/s1"}
	for _, k := range keys {
		r.block[k] = release
	}
	q := startQueue(t, r, QueueLimits{Concurrency: 3})
	for _, k := range keys {
		q.Poke(k)
	}
	for range 3 {
		<-r.started
	}
	r.quiet(t) // the bound: 3 at once
	close(release)
	<-r.started
	<-r.started
	if r.most != 3 {
		t.Errorf("at most %d ran at once, want 3", r.most)
	}
	got := slices.Clone(r.got)
	slices.Sort(got)
	if !slices.Equal(got, []string{"a/s1", "a/s2", "b/s1", "b/s2", "c/s1"}) {
		t.Errorf("ran %v", got)
	}
}

func TestQueueRefusesInvalidKeys(t *testing.T) {
	q := NewQueue(func(context.Context, string) {}, nil, QueueLimits{}, nil)
	for _, k := range []string{"", "web", "ns/", "/web", "ns/web/x", "NS/web", "ns/web x", "*", "ns/" + string(make([]byte, 64)), "a\x00left"} {
		if q.Poke(k) {
			t.Errorf("Poke(%q) accepted", k)
		}
	}
	if !q.Poke("kube-system/kube-dns") {
		t.Error("a valid key was refused")
	}
	if len(q.queue) != 1 {
		t.Errorf("queued %v", q.queue)
	}
}

func TestQueueOverflowBecomesOneFullReconcile(t *testing.T) {
	r := newRuns()
	release := make(chan struct{})
	r.block["ns/first"] = release
	q := startQueue(t, r, QueueLimits{Concurrency: 1, MaxKeys: 10})
	q.Poke("ns/first")
	r.wait(t, "ns/first")
	q.Left([]string{"be_gone"})
	for i := range 20 {
		q.Poke("ns/s" + string(rune('a'+i)))
	}
	close(release)
	// The left backends survive the overflow; the Service keys became one
	// full reconcile.
	got := []string{<-r.started, <-r.started}
	slices.Sort(got)
	if !slices.Equal(got, []string{AllServices, "left"}) {
		t.Errorf("after the overflow ran %v, want a full reconcile and the left backends", got)
	}
	r.quiet(t)
	if len(r.left) != 1 || !slices.Equal(r.left[0], []string{"be_gone"}) {
		t.Errorf("left %v", r.left)
	}
}

func TestQueueFullReconcileCoversWaitingKeys(t *testing.T) {
	r := newRuns()
	release := make(chan struct{})
	r.block["ns/busy"] = release
	q := startQueue(t, r, QueueLimits{Concurrency: 1})
	q.Poke("ns/busy")
	r.wait(t, "ns/busy")
	q.Poke("ns/a")
	q.PokeAll("restart")
	q.Poke("ns/b") // waits behind the full reconcile, which covers it
	close(release)
	r.wait(t, "ns/a")
	r.wait(t, AllServices)
	r.quiet(t)
}

func TestQueueGathersLeftBackends(t *testing.T) {
	r := newRuns()
	release := make(chan struct{})
	r.block["ns/busy"] = release
	q := startQueue(t, r, QueueLimits{Concurrency: 1})
	q.Poke("ns/busy")
	r.wait(t, "ns/busy")
	q.Left([]string{"be_b", "be_a"})
	q.Left([]string{"be_a", "be_c"})
	close(release)
	r.wait(t, "left")
	r.quiet(t)
	if len(r.left) != 1 || !slices.Equal(r.left[0], []string{"be_a", "be_b", "be_c"}) {
		t.Errorf("left %v, want one call with be_a be_b be_c", r.left)
	}
}

func TestQueueSurvivesAPanickingRun(t *testing.T) {
	calls := make(chan string, 10)
	q := NewQueue(func(_ context.Context, key string) {
		calls <- key
		if key == "ns/bad" {
			panic("boom")
		}
	}, nil, QueueLimits{Concurrency: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	q.Poke("ns/bad")
	q.Poke("ns/good")
	for _, want := range []string{"ns/bad", "ns/good"} {
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("ran %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not run after a panic", want)
		}
	}
}
