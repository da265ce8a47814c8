package e2e

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
)

// churnStep is the cluster at step i: five pods 10.244.0.i+1 .. i+5, the
// oldest one terminating. Every step has a pod no earlier step had, so no
// stale view can look like the final one by chance.
func churnStep(i int) (desired.Input, map[string]string) {
	var ips []string
	want := map[string]string{}
	for k := 1; k <= 5; k++ {
		ip := fmt.Sprintf("10.244.%d.%d", (i+k)/250, (i+k)%250+1)
		ips = append(ips, ip)
		want[ip] = "ready"
	}
	want[ips[0]] = "drain"
	return desiredtest.Terminating(desiredtest.PodCluster("ns", "web", ips...), ips[0]), want
}

// TestReplicasConvergeUnderChurn: three service instances share one HAProxy
// (one test API) and one cluster. While the endpoints change 40 times, each
// instance gets 30 concurrent requests; then the last change's event
// reaches one of them. Every request is answered 200, and the backend ends
// exactly at the last step: no duplicate, no lost update, no transaction
// left open.
func TestReplicasConvergeUnderChurn(t *testing.T) {
	api := backendAPI(t)
	first, _ := churnStep(0)
	src := desiredtest.NewLive(first)
	var instances []string
	for range 3 {
		instances = append(instances, instanceWith(t, src, 20*time.Second, api.URL).URL)
	}

	post := func(u string) int {
		resp, err := http.Post(u+"/reconcile", "", nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	const steps, perInstance = 40, 30
	var wg sync.WaitGroup
	codes := make(chan int, len(instances)*perInstance+2)
	for _, u := range instances {
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(steps*5)) * time.Millisecond)
				codes <- post(u)
			}()
		}
	}
	var want map[string]string
	for i := 1; i <= steps; i++ {
		var in desired.Input
		in, want = churnStep(i)
		src.Set(in)
		time.Sleep(5 * time.Millisecond)
	}
	codes <- post(instances[rand.IntN(len(instances))]) // the last change's event
	wg.Wait()
	// A later reconcile (a resync): the last step replaced every server, so
	// the guard parked the old ones until the new ones were UP.
	codes <- post(instances[rand.IntN(len(instances))])
	close(codes)

	n := 0
	for c := range codes {
		n++
		if c != http.StatusOK {
			t.Errorf("a request got %d", c)
		}
	}
	if n != len(instances)*perInstance+2 {
		t.Errorf("%d answers", n)
	}
	names := map[string]bool{}
	for _, s := range api.Servers("be") {
		if names[s.Name] {
			t.Errorf("duplicate server %s", s.Name)
		}
		names[s.Name] = true
	}
	if got := api.States("be"); !maps.Equal(got, want) {
		t.Errorf("final servers %v, want %v", got, want)
	}
	if n := api.OpenTransactions(); n != 0 {
		t.Errorf("%d transactions left open", n)
	}
	writes := 0
	for _, r := range api.Requests() {
		if r.Method != http.MethodGet {
			writes++
		}
	}
	t.Logf("%d write requests, %d applied (the rest lost a race), %d reloads", writes, api.Writes(), api.Reloads())
}
