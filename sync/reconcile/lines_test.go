package reconcile_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/reconcile/reconciletest"
)

// TestMissingBackendLinesAreWarnedOnce: a backend without the recommended
// lines is named in every result and logged once, at the first reconcile;
// again only when what it lacks changes; never for a driver that cannot
// tell.
func TestMissingBackendLinesAreWarnedOnce(t *testing.T) {
	three := 3
	plain := &model.RetryLines{Mode: "http"}
	d := &reconciletest.Driver{Retry: plain}
	blind := &reconciletest.Driver{ID: "runtime"} // Retry nil, like the runtime API
	var logs strings.Builder
	r := reconciler(&desiredtest.Source{In: cluster("10.244.0.1")}, d, blind)
	r.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	warnings := func() int { return strings.Count(logs.String(), "backend lacks recommended lines") }

	for _, step := range []struct {
		name     string
		retry    *model.RetryLines
		missing  []string
		warnings int
	}{
		{"first reconcile", plain, []string{model.LineRedispatch, model.LineRetryOn}, 1},
		{"same lines missing", plain, []string{model.LineRedispatch, model.LineRetryOn}, 1},
		{"redispatch added", &model.RetryLines{Mode: "http", Redispatch: 1}, []string{model.LineRetryOn}, 2},
		{"all there", &model.RetryLines{Mode: "http", Redispatch: 1, Retries: &three, RetryOn: "conn-failure empty-response"}, nil, 2},
		{"retry-on dropped again", &model.RetryLines{Mode: "http", Redispatch: 1, Retries: &three}, []string{model.LineRetryOn}, 3},
	} {
		d.Do(func(d *reconciletest.Driver) { d.Retry = step.retry })
		res, err := r.Reconcile(context.Background(), false)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		for _, tr := range res.Targets {
			want, read := step.missing, true
			if tr.Target == "runtime" {
				want, read = nil, false
			}
			if !slices.Equal(tr.MissingBackendLines, want) || tr.LinesRead != read {
				t.Errorf("%s: %s: missing %q (read %v), want %q (read %v)", step.name, tr.Target, tr.MissingBackendLines, tr.LinesRead, want, read)
			}
		}
		if n := warnings(); n != step.warnings {
			t.Errorf("%s: %d warnings in all, want %d:\n%s", step.name, n, step.warnings, logs.String())
		}
	}
	if !strings.Contains(logs.String(), `"backend":"be"`) || !strings.Contains(logs.String(), `"missing":["option redispatch 1","retry-on conn-failure empty-response"]`) {
		t.Errorf("the warning names neither the backend nor the lines:\n%s", logs.String())
	}
}

// TestUnexpectedReloadsAreWarnedOnce: writes the API reloaded for are in
// every result that had some, and the cause is logged once per target.
func TestUnexpectedReloadsAreWarnedOnce(t *testing.T) {
	src := &desiredtest.Source{In: cluster("10.244.0.1")}
	r := reconciler(src, &reconciletest.Driver{Unexpected: "a default-server line"})
	var logs strings.Builder
	r.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	for i, in := range []string{"10.244.0.1", "10.244.0.2", "10.244.0.3"} {
		src.In = cluster(in)
		res, err := r.Reconcile(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Targets[0].UnexpectedReloads != 1 {
			t.Errorf("reconcile %d: %d unexpected reloads, want 1", i, res.Targets[0].UnexpectedReloads)
		}
	}
	if n := strings.Count(logs.String(), `"msg":"unexpected reload"`); n != 1 || !strings.Contains(logs.String(), `"why":"a default-server line"`) {
		t.Errorf("%d warnings, want one naming the cause:\n%s", n, logs.String())
	}
}
