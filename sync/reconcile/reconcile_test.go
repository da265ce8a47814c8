package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

func cluster(podIPs ...string) desired.Input {
	return desiredtest.PodCluster("ingress", "web", podIPs...)
}

func reconciler(src reconcile.Source, targets ...reconcile.Driver) *reconcile.Reconciler {
	return reconciletest.Reconciler(src, targets...)
}

func TestSyncFirstRoundThenIdempotent(t *testing.T) {
	d := &reconciletest.Driver{}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}, d)
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != reconcile.StatusApplied || res.Desired != 2 || len(res.Targets) != 1 {
		t.Fatalf("result %+v", res)
	}
	tr := res.Targets[0]
	if strings.Join(tr.Add, ",") != "10-244-0-1,10-244-0-2" || tr.Attempts != 1 || tr.Target != "mem" || tr.Backend != "be" || tr.Error != "" {
		t.Errorf("target result %+v", tr)
	}
	_, applies, _ := d.Counts()
	res, err = r.Reconcile(context.Background(), false)
	if err != nil || res.Status != reconcile.StatusUnchanged {
		t.Fatalf("second: %v %+v", err, res)
	}
	if _, again, _ := d.Counts(); again != applies {
		t.Errorf("second reconcile applied a plan")
	}
}

func TestConflictIsRetriedFromAFreshRead(t *testing.T) {
	d := &reconciletest.Driver{}
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	r := reconciler(src, d)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	d.Do(func(d *reconciletest.Driver) { d.Conflicts = 2 }) // another writer was first, twice
	src.In = cluster("10.244.0.1", "10.244.0.3")
	reads, _, _ := d.Counts()
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatalf("%v %+v", err, res)
	}
	if res.Targets[0].Attempts != 3 {
		t.Errorf("attempts = %d, want 3", res.Targets[0].Attempts)
	}
	if after, _, _ := d.Counts(); after-reads != 3 {
		t.Errorf("%d reads for 3 attempts: each attempt must read afresh", after-reads)
	}
	if got := d.States(); len(got) != 2 || got["10.244.0.3"] != "ready" {
		t.Errorf("servers = %v", got)
	}
}

func TestKubernetesFailureChangesNothing(t *testing.T) {
	d := &reconciletest.Driver{}
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	r := reconciler(src, d)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	_, applies, _ := d.Counts()
	src.Err = errors.New("connection refused")
	res, err := r.Reconcile(context.Background(), false)
	if err == nil || res.Status != reconcile.StatusError || !strings.Contains(res.Error, "connection refused") || res.ErrorClass != failure.Temporary {
		t.Fatalf("err %v result %+v", err, res)
	}
	if _, after, _ := d.Counts(); after != applies {
		t.Error("HAProxy was written after a failed Kubernetes read")
	}
	if got := d.States(); got["10.244.0.1"] != "ready" {
		t.Errorf("servers = %v", got)
	}
}

func TestZeroEndpointsParksAndDeletesNothing(t *testing.T) {
	d := &reconciletest.Driver{}
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}
	r := reconciler(src, d)
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	src.In = cluster()
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.States(); len(got) != 2 || got["10.244.0.1"] != "maint" || got["10.244.0.2"] != "maint" {
		t.Errorf("servers = %v", got)
	}
	if len(res.Targets[0].Delete) != 0 || len(res.Targets[0].Maint) != 2 {
		t.Errorf("result %+v", res.Targets[0])
	}
}

func TestDryRunAppliesNothing(t *testing.T) {
	d := &reconciletest.Driver{}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, d)
	res, err := r.Reconcile(context.Background(), true)
	if err != nil || res.Status != reconcile.StatusPlanned || len(res.Targets[0].Add) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	if _, applies, _ := d.Counts(); applies != 0 || len(d.Servers()) != 0 {
		t.Error("dry run wrote")
	}
}

func TestOneTargetDownTheOtherConverges(t *testing.T) {
	good := &reconciletest.Driver{ID: "good"}
	bad := &reconciletest.Driver{ID: "bad", ReadErr: &failure.NetworkError{Err: fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)}}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, bad, good)
	r.Timeout = 30 * time.Second // the shipped RECONCILE_TIMEOUT: a retried refusal would hold the result that long
	res, err := r.Reconcile(context.Background(), false)
	if !errors.Is(err, reconcile.ErrTargets) || res.Status != reconcile.StatusError {
		t.Fatalf("err %v status %s", err, res.Status)
	}
	if len(res.Targets) != 2 || res.Targets[0].Error == "" || res.Targets[1].Error != "" {
		t.Fatalf("targets %+v", res.Targets)
	}
	// Nothing listens: the attempt fails at once and is not retried within
	// this reconcile (the follow-up tries again), so the result of the
	// target that answers is not held back.
	if res.Targets[0].Attempts != 1 || !strings.Contains(res.Targets[0].Error, "connection refused") {
		t.Errorf("down target: %d attempts, error %q; want 1, connection refused", res.Targets[0].Attempts, res.Targets[0].Error)
	}
	if got := good.States(); got["10.244.0.1"] != "ready" {
		t.Errorf("healthy target not converged: %v", got)
	}
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	d := &reconciletest.Driver{ApplyErr: errors.New("commit: configuration check failed: bad config")}
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, d)
	res, err := r.Reconcile(context.Background(), false)
	if err == nil || res.Targets[0].Attempts != 1 || !strings.Contains(res.Targets[0].Error, "bad config") || res.Targets[0].ErrorClass != failure.Permanent {
		t.Fatalf("err %v %+v", err, res.Targets)
	}
}

// TestUnmendableFailuresAreNotRetried: a read that fails for what cannot
// mend until someone changes the configuration fails the target at the
// first attempt, permanent, not after RECONCILE_TIMEOUT of retries: the
// admin socket's permission denied (as the runtime driver wraps it), a
// backend HAProxy does not have, a client certificate HAProxy refuses. A
// connection that broke, for contrast, is retried.
func TestUnmendableFailuresAreNotRetried(t *testing.T) {
	denied := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	for _, tt := range []struct {
		name  string
		err   error
		class failure.Class
	}{
		{"permission denied on the admin socket", &failure.NetworkError{Err: fmt.Errorf("dial /run/haproxy/admin.sock: %w", denied)}, failure.Permanent},
		{"a backend HAProxy does not have", &failure.BackendError{Backend: "be", Reason: "the running HAProxy has no backend of that name"}, failure.Permanent},
		{"a client certificate HAProxy refuses", &failure.NetworkError{Err: fmt.Errorf("read reply to \"show servers state be\": %w",
			&net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate authority")})}, failure.Permanent},
		{"a connection that broke", &failure.NetworkError{Err: &net.OpError{Op: "read", Net: "unix", Err: syscall.ECONNRESET}}, failure.Temporary},
	} {
		d := &reconciletest.Driver{ID: "a", ReadErr: tt.err}
		r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, d)
		r.Timeout = 300 * time.Millisecond
		start := time.Now()
		res, err := r.Reconcile(context.Background(), false)
		took := time.Since(start)
		tr := res.Targets[0]
		once := tt.class == failure.Permanent
		if err == nil || tr.ErrorClass != tt.class || res.ErrorClass != tt.class || (tr.Attempts == 1) != once || once && took > 200*time.Millisecond {
			t.Errorf("%s: %d attempts in %s, class %q (result %q), err %v; want %s, retried %v", tt.name, tr.Attempts, took, tr.ErrorClass, res.ErrorClass, err, tt.class, !once)
		}
	}
}

// TestDeletionGuardParksAndReports: every server replaced at once (e.g. a
// wrong selector): the old ones are parked, not deleted, and the result says
// so; once the replacements are in, the next reconcile deletes them.
func TestDeletionGuardParksAndReports(t *testing.T) {
	d := &reconciletest.Driver{}
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2")}
	r := reconciler(src, d)
	r.GuardPercent = 100
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	src.In = cluster("10.244.9.1")
	res, err := r.Reconcile(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Targets[0]
	if len(tr.Guarded) != 2 || len(tr.Delete) != 0 || len(tr.Maint) != 2 {
		t.Errorf("result %+v", tr)
	}
	if got := d.States(); len(got) != 3 || got["10.244.0.1"] != "maint" || got["10.244.0.2"] != "maint" || got["10.244.9.1"] != "ready" {
		t.Errorf("servers = %v", got)
	}
	res, err = r.Reconcile(context.Background(), false)
	if err != nil || len(res.Targets[0].Guarded) != 0 || len(res.Targets[0].Delete) != 2 {
		t.Fatalf("%v %+v", err, res.Targets[0])
	}
	if got := d.States(); len(got) != 1 {
		t.Errorf("servers = %v", got)
	}
}

// TestDeletionGuardDeletesBesideANotReadyPod: a scale-down parked by the
// guard beside a pod that is not ready (its server desired in maintenance,
// never UP) is deleted by the confirming reconcile: the guard waits for the
// servers meant to serve, not for that one.
func TestDeletionGuardDeletesBesideANotReadyPod(t *testing.T) {
	d := &reconciletest.Driver{}
	src := &desiredtest.Source{In: cluster("10.244.0.1", "10.244.0.2", "10.244.0.3")}
	r := reconciler(src, d)
	r.GuardPercent = 50
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	src.In = cluster("10.244.0.1", "10.244.0.4")
	no := false
	src.In.Slices[0].Endpoints[1].Conditions.Ready = &no // 10.244.0.4 is not ready
	res, err := r.Reconcile(context.Background(), false)
	if err != nil || len(res.Targets[0].Guarded) != 2 || len(res.Targets[0].Delete) != 0 {
		t.Fatalf("first: %v %+v", err, res.Targets[0])
	}
	res, err = r.Reconcile(context.Background(), false)
	if err != nil || len(res.Targets[0].Guarded) != 0 || strings.Join(res.Targets[0].Delete, ",") != "10-244-0-2,10-244-0-3" {
		t.Fatalf("confirming: %v %+v", err, res.Targets[0])
	}
	if got := d.States(); len(got) != 2 || got["10.244.0.1"] != "ready" || got["10.244.0.4"] != "maint" {
		t.Errorf("servers = %v", got)
	}
}

func TestRoundRobinPast4095ServersIsWarned(t *testing.T) {
	for _, n := range []int{4095, 4096} {
		ips := make([]string, n)
		for i := range ips {
			ips[i] = fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
		}
		var logs strings.Builder
		r := reconciler(&desiredtest.Source{In: cluster(ips...)}, &reconciletest.Driver{})
		r.MaxServers = 10000
		r.Log = slog.New(slog.NewJSONHandler(&logs, nil))
		if _, err := r.Reconcile(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(logs.String(), "at most 4095"); warned != (n > 4095) {
			t.Errorf("%d servers: warned %v", n, warned)
		}
	}
}

// gateRecorder records what the reconciler tells the readiness gate.
type gateRecorder struct{ calls []reconcile.GateInput }

func (g *gateRecorder) Update(_ context.Context, in reconcile.GateInput) {
	g.calls = append(g.calls, in)
}

// TestGateIsToldOnlyWhatItCanTrust: the readiness gate hears of real
// reconciles whose every target answered, with each pod's server; never of
// a dry run, a failed Kubernetes read or a failed target.
func TestGateIsToldOnlyWhatItCanTrust(t *testing.T) {
	in := cluster("10.244.0.1")
	in.Slices[0].Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-0"}
	src := desiredtest.NewLive(in)
	d := &reconciletest.Driver{}
	g := &gateRecorder{}
	r := reconciler(src, d)
	r.Gate = g
	if _, err := r.Reconcile(context.Background(), true); err != nil || len(g.calls) != 0 {
		t.Fatalf("dry run: %v, %d calls", err, len(g.calls))
	}
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// The in-memory driver's servers are UP once added: the first
	// reconcile added it (no check passed yet), the next sees it in service.
	if _, err := r.Reconcile(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if len(g.calls) != 2 || len(g.calls[1].Servers) != 1 || g.calls[1].Servers[0] != (reconcile.GateServer{Pod: "web-0", InService: true}) ||
		g.calls[0].Servers[0].InService {
		t.Fatalf("calls %+v", g.calls)
	}
	src.SetErr(errors.New("API down"))
	_, _ = r.Reconcile(context.Background(), false)
	src.Set(in)
	d.Do(func(d *reconciletest.Driver) { d.ReadErr = errors.New("haproxy down") })
	_, _ = r.Reconcile(context.Background(), false)
	if len(g.calls) != 2 {
		t.Errorf("told after failures: %+v", g.calls[2:])
	}
}

// TestGateIsToldPastARefusedServer: HAProxy refuses one pod's server; the
// reconcile fails for that server alone, and the gate still hears of every
// pod: the other in service, the refused one not, saying why.
func TestGateIsToldPastARefusedServer(t *testing.T) {
	in := cluster("10.244.0.1", "10.244.0.2")
	in.Slices[0].Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-0"}
	in.Slices[0].Endpoints[1].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}
	d := &reconciletest.Driver{Refuse: map[string]bool{"web-1": true}} // pod mode: servers are named for their pods
	g := &gateRecorder{}
	r := reconciler(&desiredtest.Source{In: in}, d)
	r.Gate = g
	for range 2 { // the first adds web-0's server (no check passed yet); the next sees it in service
		if _, err := r.Reconcile(context.Background(), false); !errors.Is(err, reconcile.ErrTargets) {
			t.Fatalf("err = %v, want the refusal", err)
		}
	}
	if len(g.calls) != 2 {
		t.Fatalf("gate told %d times, want 2: %+v", len(g.calls), g.calls)
	}
	got := g.calls[1].Servers
	if len(got) != 2 || got[0] != (reconcile.GateServer{Pod: "web-0", InService: true}) ||
		got[1].Pod != "web-1" || got[1].InService || !strings.Contains(got[1].Why, "web-1 refused on mem be") {
		t.Errorf("verdicts %+v", got)
	}
}

// TestWithPass: a pass is made once and kept by contexts under it, so that
// a many-Services pass shares one across its Services' reconciles.
func TestWithPass(t *testing.T) {
	bg := context.Background()
	if reconcile.PassOf(bg) != nil {
		t.Fatal("a pass outside WithPass")
	}
	a := reconcile.WithPass(bg)
	if reconcile.PassOf(a) == nil || reconcile.PassOf(reconcile.WithPass(a)) != reconcile.PassOf(a) {
		t.Fatal("WithPass under a pass made another")
	}
	if reconcile.PassOf(reconcile.WithPass(bg)) == reconcile.PassOf(a) {
		t.Fatal("two passes are equal")
	}
}

// TestMakeBeforeBreakForgetsARefusedReplacement: a leaving server kept in
// traffic while its replacement waits for a check (make-before-break) is
// not kept for a replacement HAProxy refused: the reconcile remembers the
// refusals of the last apply on each target and backend (plan.Policy.Refused),
// so the next one parks the not-ready pod's server, since another cluster's
// server serves. Before, it stayed in traffic for as long as the refused pod
// did (the history checker, seed 324: beside ready backups).
func TestMakeBeforeBreakForgetsARefusedReplacement(t *testing.T) {
	d := &reconciletest.Driver{Refuse: map[string]bool{"east-10-244-0-2": true}}
	d.Pol.GateChecks = true
	src := desiredtest.NewLive(cluster("10.244.0.1"))
	east, west := reconciler(src, d), reconciler(src, d)
	east.Options.NamePrefix, west.Options.NamePrefix = "east-", "west-"
	for range 2 { // gated, then in service
		for _, r := range []*reconcile.Reconciler{east, west} {
			if _, err := r.Reconcile(context.Background(), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	in := cluster("10.244.0.1", "10.244.0.2") // web-0 not ready, web-1 ready and refused
	no := false
	in.Slices[0].Endpoints[0].Conditions.Ready = &no
	src.Set(in)
	res, err := east.Reconcile(context.Background(), false)
	if !errors.Is(err, reconcile.ErrTargets) {
		t.Fatalf("err = %v, want the refusal", err)
	}
	if got := res.Targets[0].HandingOver; len(got) != 1 || got[0] != "east-10-244-0-1" {
		t.Fatalf("first reconcile: handing over %v, want the leaving server kept while its replacement is not known refused", got)
	}
	res, _ = east.Reconcile(context.Background(), false)
	if got := d.Servers()["east-10-244-0-1"].State; got != "maint" {
		t.Errorf("after the refusal: the not-ready pod's server is %s, handing over %v; want it parked", got, res.Targets[0].HandingOver)
	}
	if got := d.Servers()["west-10-244-0-1"].State; got != "ready" {
		t.Errorf("the other cluster's server is %s", got)
	}
}

// TestTargetDoneUnderAnotherTellsBoth: a WithTargetDone given under another
// (a class Service's left backend, early, under the follow-up's watch of
// waiting servers) is told after it: neither hides the other.
func TestTargetDoneUnderAnotherTellsBoth(t *testing.T) {
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, &reconciletest.Driver{})
	var told []string
	ctx := reconcile.WithTargetDone(context.Background(), func(target string, _ []reconcile.TargetResult) { told = append(told, "outer "+target) })
	ctx = reconcile.WithTargetDone(ctx, func(target string, _ []reconcile.TargetResult) { told = append(told, "inner "+target) })
	if _, err := r.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(told, ", "); got != "outer mem, inner mem" {
		t.Errorf("told %q, want the outer then the inner, once each", got)
	}
}
