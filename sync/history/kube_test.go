package history

import (
	"testing"
	"time"
)

// TestWatchListsAgainAfterCompaction: while the API server is unreachable
// from serve, Kubernetes goes on (a pod joins, another goes not ready) and
// etcd compacts what happened; the service's watches resume from versions
// etcd no longer has, are answered 410 Gone, list again, and the pods
// enter and leave as if nothing had been cut (ready-pod-in-service,
// out-of-traffic, converges), in node mode as shipped.
func TestWatchListsAgainAfterCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("real HAProxy and kube-apiserver histories")
	}
	r := RunSteps(t, Setup{Seed: 1, Driver: Runtime, Serve: true, Nodes: 3}, 6, []Step{
		{Wait: time.Second, Kind: KubeDown},
		{Wait: 500 * time.Millisecond, Kind: Add, Pods: []int{7}},
		{Wait: 500 * time.Millisecond, Kind: NotReady, Pods: []int{2}},
		{Wait: time.Second, Kind: KubeUp},
		{Wait: 3 * time.Second, Kind: Ready, Pods: []int{2}},
		{Wait: 2 * time.Second, Kind: Add, Pods: []int{8}},
		{Wait: 2 * time.Second, Kind: Terminate, Pods: []int{3}},
		{Wait: 2 * time.Second, Kind: Gone, Pods: []int{3}},
	})
	expectNone(t, r)
	// Two watches read etcd itself (EndpointSlices, Nodes): each is
	// answered 410 once, lists again and resumes from the list's version.
	// One resumed from its expired version again would be answered 410
	// for ever, each restart a poke, backing off.
	if r.Expired == 0 || r.Expired > 2 {
		t.Errorf("%d watches of serve's answered 410 after one compaction, want 1 or 2 (each of the two watches that read etcd at most once)", r.Expired)
	}
	t.Logf("%d watches answered 410 and listed again", r.Expired)
}

// TestExpiredBound: 410s allowed per serve process and compaction.
func TestExpiredBound(t *testing.T) {
	for _, c := range []struct {
		starts, ups int
		span        time.Duration
		want        int
	}{
		{1, 0, time.Minute, 2},
		{1, 1, time.Minute, 4},
		{2, 1, time.Minute, 8},
		{1, 0, 11 * time.Minute, 6},
	} {
		if got := expiredBound(c.starts, c.ups, c.span); got != c.want {
			t.Errorf("expiredBound(%d, %d, %v) = %d, want %d", c.starts, c.ups, c.span, got, c.want)
		}
	}
}

// TestTargetDownAndBack: a target whose admin socket, or Data Plane API,
// refuses every connection for a few seconds while its HAProxy serves on
// (and, with the Data Plane driver, the socket down while the API answers):
// pods that come and go meanwhile are carried once it is back, within the
// follow-up's next try (downRecovery), and nothing that served before is
// lost (a request may fail only while no pod in service before still
// answers). serve, as shipped, in pod mode with two targets.
func TestTargetDownAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("real HAProxy and kube-apiserver histories")
	}
	for _, c := range []struct {
		name     string
		driver   Driver
		down, up Kind
	}{
		{"runtime/socket", Runtime, SocketDown, SocketUp},
		{"dataplane/API", Dataplane, APIDown, APIUp},
		{"dataplane/socket", Dataplane, SocketDown, SocketUp},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := RunSteps(t, Setup{Seed: 1, Driver: c.driver, Serve: true, Targets: 2}, 6, []Step{
				{Wait: 3 * time.Second, Kind: c.down, Target: 1}, // (the pods in service well before)
				{Wait: 500 * time.Millisecond, Kind: Add, Pods: []int{7}},
				{Wait: 500 * time.Millisecond, Kind: Terminate, Pods: []int{2}},
				{Wait: time.Second, Kind: Gone, Pods: []int{2}},
				{Wait: time.Second, Kind: c.up, Target: 1},
				{Wait: 5 * time.Second, Kind: NotReady, Pods: []int{3}},
				{Wait: 2 * time.Second, Kind: Add, Pods: []int{8}},
			})
			expectNone(t, r)
		})
	}
}
