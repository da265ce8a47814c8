package reconcile

import (
	"reflect"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

func TestNextLook(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const step, slow, patience = 50 * time.Millisecond, 10 * time.Second, 2 * time.Minute
	for _, tt := range []struct {
		name  string
		since []time.Time
		want  time.Duration
	}{
		{"one server begins to wait", []time.Time{now}, step},
		{"one server at its patience", []time.Time{ago(patience)}, step},
		{"one server past its patience", []time.Time{ago(patience + time.Millisecond)}, slow},
		{"a dead server and one that joined it", []time.Time{ago(time.Hour), ago(time.Second)}, step},
		{"the one that joined is past its patience too", []time.Time{ago(time.Hour), ago(3 * time.Minute)}, slow},
		{"none waits", nil, slow},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := next(now, tt.since, step, slow, patience); got != tt.want {
				t.Errorf("next = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSinceEachServerBeganToWait(t *testing.T) {
	then := time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC)
	now := then.Add(time.Hour)
	key := func(target, name string) serverKey { return serverKey{target, "be", name} }
	was := map[serverKey]time.Time{key("a", "dead"): then, key("a", "gone"): then, key("b", "n1"): then}
	failed := TargetResult{Target: "b", Backend: "be", Error: "context deadline exceeded"}
	refused := TargetResult{Target: "b", Backend: "be", Error: "1 server change(s) refused",
		Failed: []plan.ServerError{{Server: "n2", Error: "refused"}}, Waiting: []string{"n3"}}
	for _, tt := range []struct {
		name string
		trs  []TargetResult
		kept func(string) bool
		want map[serverKey]time.Time
	}{
		{"a server that waited keeps its time, a new one begins now, one no longer listed goes",
			[]TargetResult{waiting("a", "dead", "new"), waiting("b")},
			nil, map[serverKey]time.Time{key("a", "dead"): then, key("a", "new"): now}},
		{"a backend that failed says nothing of what waits there",
			[]TargetResult{waiting("a", "dead"), failed},
			nil, map[serverKey]time.Time{key("a", "dead"): then, key("b", "n1"): then}},
		{"one that refused single servers lists what waits",
			[]TargetResult{waiting("a", "dead"), refused},
			nil, map[serverKey]time.Time{key("a", "dead"): then, key("b", "n3"): now}},
		{"a target kept is left as it was",
			[]TargetResult{waiting("a", "new"), waiting("b")},
			func(target string) bool { return target == "b" }, map[serverKey]time.Time{key("a", "new"): now, key("b", "n1"): then}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := since(was, now, tt.trs, waitingOf, tt.kept); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("since = %v, want %v", got, tt.want)
			}
		})
	}
}
