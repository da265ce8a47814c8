package handler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/handler/auth"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/drained"
)

// drainer answers with status, and records what it was asked.
type drainer struct {
	mu     sync.Mutex
	status string
	asked  []drained.Query
	bounds []time.Duration
	hold   chan struct{} // when set, Wait blocks until it is closed
}

func (d *drainer) Wait(_ context.Context, q drained.Query, bound time.Duration) drained.Answer {
	d.mu.Lock()
	d.asked, d.bounds = append(d.asked, q), append(d.bounds, bound)
	hold, status := d.hold, d.status
	d.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if status == drained.StatusAbsent {
		return drained.Answer{Status: status, Targets: []drained.TargetState{{Target: "t", Backend: "be", State: drained.Absent, Drained: true}}}
	}
	return drained.Answer{Status: status, Targets: []drained.TargetState{{Target: "t", Backend: "be", State: "drain", Sessions: 1}}}
}

func drainedServer(t *testing.T, d *drainer, nodeMode bool) *httptest.Server {
	t.Helper()
	tok, err := auth.NewToken("tok-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler.New(handler.Config{Drained: d, NodeMode: nodeMode, Auth: tok,
		Wait: 30 * time.Second, MaxDrainWaiters: 2}))
	t.Cleanup(srv.Close)
	return srv
}

func getDrained(t *testing.T, srv *httptest.Server, query string, token string) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/drained?"+query, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body, resp.Header
}

const tok = "tok-0123456789abcdef"

func TestDrainedAnswers(t *testing.T) {
	d := &drainer{status: drained.StatusWaiting}
	srv := drainedServer(t, d, true)
	code, body, h := getDrained(t, srv, "node=node-a&wait=2s", tok)
	if code != http.StatusServiceUnavailable || body["status"] != "waiting" || h.Get("Retry-After") != "1" || body["targets"] == nil {
		t.Errorf("waiting: %d %v %v", code, body, h)
	}
	d.mu.Lock()
	d.status = drained.StatusDrained
	d.mu.Unlock()
	code, body, _ = getDrained(t, srv, "ip=127.0.0.9&wait=1h", tok)
	if code != http.StatusOK || body["status"] != "drained" {
		t.Errorf("drained: %d %v", code, body)
	}
	want := []drained.Query{{Server: desired.ServerName("node-a")}, {Address: netip.MustParseAddr("127.0.0.9")}}
	if len(d.asked) != 2 || d.asked[0] != want[0] || d.asked[1] != want[1] {
		t.Errorf("asked %+v, want %+v", d.asked, want)
	}
	if d.bounds[0] != 2*time.Second || d.bounds[1] != 30*time.Second {
		t.Errorf("bounds %v, want 2s and the cap (30s)", d.bounds)
	}
	if code, _, _ := getDrained(t, srv, "node=node-a", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
}

func TestDrainedRejectsBadQueries(t *testing.T) {
	d := &drainer{status: drained.StatusDrained}
	node := drainedServer(t, d, true)
	pod := drainedServer(t, d, false)
	for name, tt := range map[string]struct {
		srv   *httptest.Server
		query string
		says  string
	}{
		"neither":              {node, "wait=1s", "exactly one"},
		"both":                 {node, "node=a&ip=127.0.0.1", "exactly one"},
		"node in pod mode":     {pod, "node=a", "TARGET_ADDRESS=node"},
		"not a node name":      {node, "node=" + strings.Repeat("A_", 5), "not a Node name"},
		"a long node name":     {node, "node=" + strings.Repeat("a", 254), "not a Node name"},
		"not an address":       {pod, "ip=10.244.0.256", "not an IP address"},
		"not canonical":        {pod, "ip=010.244.0.1", "not an IP address"},
		"a zone":               {pod, "ip=fe80::1%25eth0", "not an IP address"},
		"a bad wait":           {pod, "ip=10.244.0.1&wait=soon", "wait"},
		"a negative wait":      {pod, "ip=10.244.0.1&wait=-1s", "wait"},
		"an unknown parameter": {pod, "ip=10.244.0.1&force=true", "unknown parameter"},
		"a parameter twice":    {pod, "ip=10.244.0.1&ip=10.244.0.2", "2 times"},
	} {
		t.Run(name, func(t *testing.T) {
			code, body, _ := getDrained(t, tt.srv, tt.query, tok)
			if code != http.StatusBadRequest || body["status"] != "error" || !strings.Contains(body["error"].(string), tt.says) {
				t.Errorf("%d %v, want 400 saying %q", code, body, tt.says)
			}
		})
	}
	if len(d.asked) != 0 {
		t.Errorf("HAProxy was read for a bad query: %+v", d.asked)
	}
}

// TestDrainedCallersAreBounded: past MaxDrainWaiters, callers get 429 at
// once instead of one more reader of every target.
func TestDrainedCallersAreBounded(t *testing.T) {
	d := &drainer{status: drained.StatusDrained, hold: make(chan struct{})}
	srv := drainedServer(t, d, true)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); getDrained(t, srv, "node=a&wait=10s", tok) }()
	}
	for {
		d.mu.Lock()
		n := len(d.asked)
		d.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	code, _, h := getDrained(t, srv, "node=a&wait=10s", tok)
	close(d.hold)
	wg.Wait()
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("third caller: %d, want 429 with Retry-After", code)
	}
}

// TestDrainedUnknownServerIsAnError: a server no target has (a misspelt
// Node, a pod IP in node mode) is 404 with what is likely wrong, not
// "drained": a preStop hook would skip its wait. missingOk=true asks for
// drained instead.
func TestDrainedUnknownServerIsAnError(t *testing.T) {
	d := &drainer{status: drained.StatusAbsent}
	node := drainedServer(t, d, true)
	pod := drainedServer(t, d, false)
	for _, tt := range []struct {
		srv         *httptest.Server
		query, says string
		code        int
	}{
		{node, "node=nodee-a", `no target has a server for node "nodee-a": is the Node name right?`, http.StatusNotFound},
		{node, "ip=10.244.1.10", "servers are Nodes here (TARGET_ADDRESS=node)", http.StatusNotFound},
		{pod, "ip=10.244.1.10", "is it the IP of a pod of the followed Service?", http.StatusNotFound},
		{node, "node=nodee-a&missingOk=true", "", http.StatusOK},
		{node, "node=nodee-a&missingOk=maybe", "missingOk", http.StatusBadRequest},
	} {
		code, body, _ := getDrained(t, tt.srv, tt.query, tok)
		msg, _ := body["error"].(string)
		switch {
		case code != tt.code:
			t.Errorf("%s: %d %v, want %d", tt.query, code, body, tt.code)
		case code == http.StatusOK && body["status"] != "drained":
			t.Errorf("%s: %v, want drained", tt.query, body)
		case code != http.StatusOK && (body["status"] != "error" || !strings.Contains(msg, tt.says)):
			t.Errorf("%s: %v, want an error saying %q", tt.query, body, tt.says)
		case code == http.StatusNotFound && (body["targets"] == nil || !strings.Contains(msg, "missingOk=true")):
			t.Errorf("%s: %v, want the targets and how to ask otherwise", tt.query, body)
		}
	}
}
