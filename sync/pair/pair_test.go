package pair

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
)

func up(pid int64, node string, sec int) Process {
	return Process{PID: pid, Node: node, Uptime: time.Duration(sec) * time.Second, HasUptime: true}
}

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		name   string
		rt, dp Process
		gap    time.Duration
		want   Verdict
		why    string
	}{
		{"one worker", up(42, "haproxy-0", 100), up(42, "haproxy-0", 100), 0, Same, ""},
		{"uptime ticked between the reads", up(42, "haproxy-0", 100), up(42, "haproxy-0", 102), 0, Same, ""},
		{"a slow second read", up(42, "haproxy-0", 100), up(42, "haproxy-0", 105), 3 * time.Second, Same, ""},
		{"another worker", up(42, "haproxy-0", 100), up(43, "haproxy-0", 100), 0, Different, "process ids differ"},
		{"two pods, same pid", up(8, "haproxy-0", 100), up(8, "haproxy-1", 100), 0, Different, "node names differ"},
		{"pid reused by another HAProxy", up(42, "host", 100), up(42, "host", 3), 0, Different, "uptimes differ"},
		{"all three", up(8, "a", 100), up(9, "b", 3), 0, Different, "process ids, node names, uptimes differ"},
		{"node unknown on one side", up(42, "", 100), up(42, "haproxy-0", 100), 0, Same, ""},
		{"uptime unknown on one side", Process{PID: 42, Node: "n"}, up(42, "n", 5000), 0, Same, ""},
		{"no pid from the API", up(42, "n", 1), Process{Node: "n"}, 0, Unknown, "a process id is missing"},
		{"no pid from the socket", Process{}, up(42, "n", 1), 0, Unknown, "a process id is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, why := Compare(c.rt, c.dp, c.gap)
			if v != c.want || why != c.why {
				t.Errorf("Compare = %v %q, want %v %q", v, why, c.want, c.why)
			}
		})
	}
}

// views is a Reader whose answers a test sets.
type views struct {
	mu    sync.Mutex
	p     []Process // answered in turn, the last one repeated
	err   error
	reads int
}

func (v *views) ProcessInfo(context.Context) (Process, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reads++
	if v.err != nil {
		return Process{}, v.err
	}
	p := v.p[0]
	if len(v.p) > 1 {
		v.p = v.p[1:]
	}
	return p, nil
}

func (v *views) set(p ...Process) { v.mu.Lock(); v.p, v.err = p, nil; v.mu.Unlock() }

// TestCheckReadsAgainAfterAReload: right after a reload one view may
// still show the old worker; a second read after settle decides.
func TestCheckReadsAgainAfterAReload(t *testing.T) {
	rt := &views{p: []Process{up(11, "n", 0)}}
	dp := &views{p: []Process{up(10, "n", 60), up(11, "n", 0)}} // the old worker, then the new
	o, err := Check(context.Background(), rt, dp, time.Millisecond)
	if err != nil || o.Verdict != Same || dp.reads != 2 {
		t.Fatalf("Check = %+v %v after %d reads, want same after 2", o, err, dp.reads)
	}
	rt, dp = &views{p: []Process{up(11, "n", 0)}}, &views{p: []Process{up(12, "n", 0)}}
	o, err = Check(context.Background(), rt, dp, time.Millisecond)
	if err != nil || o.Verdict != Different || o.Why != "process ids differ" || dp.reads != 2 {
		t.Fatalf("Check = %+v %v after %d reads, want different after 2", o, err, dp.reads)
	}
	dp.err = errors.New("connection refused")
	if o, err = Check(context.Background(), rt, dp, time.Millisecond); err == nil || o.Verdict != Unknown {
		t.Fatalf("Check with an unreadable API = %+v %v, want an error", o, err)
	}
}

// TestGuard: a mismatch is a Permanent *MismatchError naming the pair and
// both views, logged once when it begins and once when it ends, told to
// OnChange; an unreadable view keeps the verdict.
func TestGuard(t *testing.T) {
	var logs bytes.Buffer
	rt, dp := &views{p: []Process{up(7, "a", 5)}}, &views{p: []Process{up(7, "a", 5)}}
	var changes []bool
	g := &Guard{Pair: 2, Dataplane: "http://a:5555", Runtime: "unix:///run/a.sock", DataplaneView: dp, RuntimeView: rt,
		Settle: time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		OnChange: func(m bool) { changes = append(changes, m) }}
	ctx := context.Background()
	if err := g.Verify(ctx, nil); err != nil {
		t.Fatalf("matching pair: %v", err)
	}
	dp.set(up(9, "b", 5))
	if err := g.Mismatch(); err != nil {
		t.Fatalf("the verdict kept: %v", err)
	}
	err := g.Verify(ctx, nil)
	var me *MismatchError
	if !errors.As(err, &me) || failure.Of(err) != failure.Permanent {
		t.Fatalf("after a reload to another HAProxy: %v (%s), want a Permanent *MismatchError", err, failure.Of(err))
	}
	for _, want := range []string{"HAPROXY_DATAPLANE_URL http://a:5555", "HAPROXY_RUNTIME_URL unix:///run/a.sock", "pair 2",
		`the Data Plane API reports pid 9, node "b", up 5s`, `the runtime socket pid 7, node "a", up 5s`, "process ids, node names differ"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := g.Verify(ctx, nil); err == nil {
		t.Fatal("still mismatched: no error")
	}
	dp.err = errors.New("refused")
	if err := g.Verify(ctx, nil); !errors.As(err, &me) || !errors.As(g.Mismatch(), &me) {
		t.Fatalf("an unreadable view keeps the mismatch: %v", err)
	}
	dp.set(up(7, "a", 6))
	if err := g.Verify(ctx, nil); err != nil || g.Mismatch() != nil {
		t.Fatalf("matching again: %v", err)
	}
	if n := strings.Count(logs.String(), "nothing is written to this target"); n != 1 {
		t.Errorf("%d lines for the mismatch, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "writes resume"); n != 1 {
		t.Errorf("%d lines for its end, want 1:\n%s", n, logs.String())
	}
	if want := []bool{false, true, true, false}; !slices.Equal(changes, want) {
		t.Errorf("OnChange %v, want %v", changes, want)
	}
}

// TestVerifyChecksOncePerPass: the reads of one pass share one check, the
// next pass checks again, and a view that hangs costs one Timeout a pass,
// not one per read.
func TestVerifyChecksOncePerPass(t *testing.T) {
	rt, dp := &views{p: []Process{up(7, "a", 5)}}, &views{p: []Process{up(7, "a", 5)}}
	g := &Guard{DataplaneView: dp, RuntimeView: rt, Settle: time.Millisecond}
	ctx := context.Background()
	pass := new(int)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := g.Verify(ctx, pass); err != nil {
				t.Errorf("Verify: %v", err)
			}
		})
	}
	wg.Wait()
	if dp.reads != 1 || rt.reads != 1 {
		t.Fatalf("20 reads of one pass read the views %d and %d times, want once", dp.reads, rt.reads)
	}
	dp.set(up(9, "b", 5))
	if err := g.Verify(ctx, pass); err != nil {
		t.Fatalf("same pass, checked already: %v", err)
	}
	if err := g.Verify(ctx, new(int)); err == nil {
		t.Fatal("the next pass, another HAProxy behind the API: no mismatch")
	}

	hung := &hangs{}
	g = &Guard{DataplaneView: hung, RuntimeView: rt, Timeout: 20 * time.Millisecond}
	pass = new(int)
	for range 10 {
		_ = g.Verify(ctx, pass)
	}
	if hung.calls != 1 {
		t.Errorf("a hung view was asked %d times in one pass (each read waiting its Timeout), want once", hung.calls)
	}
}

// hangs is a Reader that answers only when its context ends.
type hangs struct{ calls int }

func (h *hangs) ProcessInfo(ctx context.Context) (Process, error) {
	h.calls++
	<-ctx.Done()
	return Process{}, ctx.Err()
}

// gated is a Reader that answers once release is closed, counting reads.
type gated struct {
	release chan struct{}
	p       Process
	reads   atomic.Int32
}

func (v *gated) ProcessInfo(ctx context.Context) (Process, error) {
	v.reads.Add(1)
	select {
	case <-v.release:
		return v.p, nil
	case <-ctx.Done():
		return Process{}, ctx.Err()
	}
}

// TestVerifyTakesTheCheckItWaitedFor: a Verify that comes while another
// check runs (serve's start-up check in the background) waits for it and
// takes its verdict for the pass, reading nothing again; and a Verify whose
// context ends while it waits answers at once with the verdict kept. Before,
// the wait ignored the context and then checked again: a slow pair cost its
// first reconcile two checks in a row.
func TestVerifyTakesTheCheckItWaitedFor(t *testing.T) {
	release := make(chan struct{})
	rt, dp := &gated{release: release, p: up(7, "a", 5)}, &gated{release: release, p: up(8, "b", 5)}
	g := &Guard{DataplaneView: dp, RuntimeView: rt, Settle: time.Millisecond, Timeout: 5 * time.Second}
	checked := make(chan error, 1)
	go func() { _, err := g.Check(context.Background()); checked <- err }()
	for rt.reads.Load()+dp.reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Cut while the check runs: the verdict kept (none yet), at once.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	cut := make(chan error, 1)
	go func() { cut <- g.Verify(ctx, new(int)) }()
	select {
	case err := <-cut:
		if err != nil {
			t.Fatalf("a Verify cut while waiting: %v, want the verdict kept (none)", err)
		}
	case <-time.After(2 * time.Second):
		close(release)
		t.Fatal("a Verify whose context ended still waits for the check under way")
	}
	verified := make(chan error, 1)
	go func() { verified <- g.Verify(context.Background(), new(int)) }()
	for g.waiting.Load() == 0 { // the Verify waits for the check under way
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	var me *MismatchError
	if err := <-verified; !errors.As(err, &me) {
		t.Fatalf("the waiting Verify: %v, want the mismatch the check it waited for found", err)
	}
	// Two views, read again after the settle (they differ): 4 reads by
	// the one check; the Verify read none.
	if n := rt.reads.Load() + dp.reads.Load(); n != 4 {
		t.Errorf("%d reads of the views, want the one check's 4 (the waiting Verify reads none)", n)
	}
}
