package e2e

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// rolloutSize reads a size of BenchmarkRolloutUnderLoad from env (def when
// unset): the test run keeps it small, `make bench` may enlarge it.
func rolloutSize(b *testing.B, env string, def int) int {
	n := def
	if v := os.Getenv(env); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive number", env, v)
		}
	}
	return n
}

// The rhythm of one step of BenchmarkRolloutUnderLoad.
const (
	rolloutNotReady    = 500 * time.Millisecond // a new one's life before its readiness passes
	rolloutTerminating = 2 * time.Second        // a leaving one's terminating phase (graceful)
	rolloutGrace       = 200 * time.Millisecond // to-not-ready-200ms ignores a leaving one's first 200 ms
	rolloutClients     = 8
)

// BenchmarkRolloutUnderLoad measures a rolling update (maxSurge 1,
// maxUnavailable 0) under continuous client load through HAProxy's
// frontend: the real service (serve, watching, the shipped check timing)
// against a real kube-apiserver and a real HAProxy (HKS_HAPROXY), in node
// and pod mode, through the runtime API driver alone (runtime) or the Data
// Plane API test server with the runtime socket (dataplane).
//
// HKS_BENCH_ROLLOUT_REPLICAS (4) replicas serve, then
// HKS_BENCH_ROLLOUT_STEPS (4) steps each replace the oldest one. A step: a
// new one appears not ready (pod mode: a new endpoint whose listener answers
// at its pod IP; node mode: a new Node whose listener answers at its
// InternalIP and the nodePort, hosting the new endpoint) and becomes ready
// 500 ms later (an EndpointSlice write); right after, the oldest one leaves:
//   - graceful: its endpoint goes terminating (serving, not ready) for 2 s
//     while its listener still answers, then the endpoint is removed and
//     the listener closed;
//   - abrupt: its listener is closed, then at once its endpoint removed (a
//     node or pod that dies as its endpoint goes), then 2 s pass.
//
// Eight clients send requests back to back all along, each a fresh TCP
// connection. The metrics, over the whole rollout (from the first step
// until HAProxy has exactly the new replicas in service, plus 300 ms):
//   - requests: requests sent; failed: those that got an error or an empty
//     answer (HAProxy's retries and redispatch hide a refused connect);
//   - failed-at-close: of those, the ones in flight while a leaving
//     replica's listener closed (started before its Close returned, ended
//     after it was called): most likely a connection HAProxy had handed to
//     it already, which its death reset;
//   - to-not-ready: requests answered by a replica that should have got no
//     new connection when the request started: a leaving one (graceful:
//     the request started after its terminating write returned; abrupt:
//     after its listener closed, so none can be), or a new one not ready
//     yet (the answer came before its ready write was sent). Strict: the
//     watch and the reconcile take tens of milliseconds, during which
//     HAProxy still sends to a leaving replica as it was told, so under
//     load this is not 0;
//   - to-not-ready-200ms: the same, but a leaving replica's requests are
//     counted only when they started 200 ms or more after its write (a
//     not-ready one's always): what that propagation does not explain;
//   - before-ready: of those, answered by a new replica before its ready
//     write (a server in service too early);
//   - retried, redispatched: the backend's retries and redispatches
//     (HAProxy's wretr and wredis, from its start): what the retry lines
//     did to hide a failed connection;
//   - leaving-last-max-ms: from a leaving replica's terminating write
//     (returned) to the start of the last request it answered, the largest
//     over the steps (0: none started after the write);
//   - ready-first-p50-ms, ready-first-max-ms: from a new replica's ready
//     write (sent) to the end of the first request it answered, over the
//     steps: the watch, the reconciles and whatever check its server
//     still has to pass then.
//
// It fails only when the rollout does not converge, no request was sent,
// or a new replica never answered: the counts are reported, not asserted.
func BenchmarkRolloutUnderLoad(b *testing.B) {
	for _, mode := range []desired.Mode{desired.NodeMode, desired.PodMode} {
		for _, driver := range []string{"runtime", "dataplane"} {
			for _, leave := range []string{"graceful", "abrupt"} {
				b.Run(fmt.Sprintf("%s/%s/%s", mode, driver, leave), func(b *testing.B) {
					rolloutUnderLoad(b, mode, driver == "dataplane", leave == "abrupt", false)
				})
			}
		}
	}
}

// rolloutHTTPLines are the backend lines of BenchmarkRolloutUnderLoadHTTP:
// with the defaults' "option redispatch 1" and "retries 3"
// (haproxytest.RecommendedLines), the three lines recommended for an http
// backend.
var rolloutHTTPLines = []string{"balance roundrobin", "option tcp-check", "retry-on conn-failure empty-response"}

// BenchmarkRolloutUnderLoadHTTP is BenchmarkRolloutUnderLoad with the
// frontend and the backend in http mode (rolloutHTTPLines), through the
// runtime API driver: each replica is a Go HTTP server that answers every
// request with its name, and the clients send GET requests, a fresh
// connection each (no keep-alive); a request fails when it gets an error
// or a status other than 200. A replica stops with http.Server.Close: its
// listener and every connection it accepted close at once, as when its
// process dies, so a request HAProxy had sent it gets an empty response,
// which "retry-on empty-response" sends again to another server.
//
// It runs the abrupt variant only, where tcp mode fails requests;
// HKS_BENCH_ROLLOUT_HTTP=all adds the graceful one.
func BenchmarkRolloutUnderLoadHTTP(b *testing.B) {
	leaves := []string{"abrupt"}
	if os.Getenv("HKS_BENCH_ROLLOUT_HTTP") == "all" {
		leaves = []string{"graceful", "abrupt"}
	}
	for _, mode := range []desired.Mode{desired.NodeMode, desired.PodMode} {
		for _, leave := range leaves {
			b.Run(fmt.Sprintf("%s/runtime/%s", mode, leave), func(b *testing.B) {
				rolloutUnderLoad(b, mode, false, leave == "abrupt", true)
			})
		}
	}
}

// replica is one pod (pod mode) or Node hosting one (node mode) of the
// rollout, and what the rollout told Kubernetes about it.
type replica struct {
	name    string // its listener's name: what a request it answers reads
	addr    string // its server's address in HAProxy
	ep      endpoint
	stop    func()    // closes its listener (tcp) or stops its HTTP server
	readyAt time.Time // its ready write was sent (zero: ready from the start)
	noNewAt time.Time // it should take no new connection from then on (zero: never)
	// Its listener's Close was called at closeFrom and returned at closeTo
	// (zero: never).
	closeFrom, closeTo time.Time
}

// answered is one client request.
type answered struct {
	start, end time.Time
	name       string
	err        error
}

func rolloutUnderLoad(b *testing.B, mode desired.Mode, dataplane, abrupt, httpMode bool) {
	replicas := rolloutSize(b, "HKS_BENCH_ROLLOUT_REPLICAS", 4)
	steps := rolloutSize(b, "HKS_BENCH_ROLLOUT_STEPS", 4)
	if replicas+steps > 250 {
		b.Fatalf("%d replicas and %d steps: at most 250 in all", replicas, steps)
	}
	var w *world
	if httpMode {
		w = newWorldProxy(b, "http", rolloutHTTPLines, "web", mode, []desired.PortBackend{{Backend: "be"}})
	} else {
		w = newWorld(b, "web", mode, []desired.PortBackend{{Backend: "be"}})
	}
	serve := func(name, ip string, port int32) func() {
		if httpMode {
			return serveName(b, name, fmt.Sprintf("%s:%d", ip, port))
		}
		return listen(b, name, ip, port).Close
	}
	svc := w.service("web", corev1.ServiceTypeNodePort, corev1.ServicePort{Name: "http", Port: 80})
	np := svc.Spec.Ports[0].NodePort
	podPort := int32(haproxytest.FreePort(b, "10.245.220.1"))
	ports := map[string]int32{"http": podPort}

	newReplica := func(i int) *replica {
		r := &replica{}
		if mode == desired.NodeMode {
			r.addr = fmt.Sprintf("127.0.70.%d", i+1)
			r.name = w.node(fmt.Sprintf("n%03d", i), r.addr)
			r.stop = serve(r.name, r.addr, np)
			r.ep = endpoint{ip: fmt.Sprintf("10.245.221.%d", i+1), node: r.name}
		} else {
			r.addr = fmt.Sprintf("10.245.220.%d", i+1)
			r.name = fmt.Sprintf("web-%03d", i)
			r.stop = serve(r.name, r.addr, podPort)
			r.ep = endpoint{ip: r.addr, pod: r.name}
		}
		return r
	}
	var all, serving, leaving []*replica // serving: ready, oldest first
	var incoming *replica
	write := func() {
		var eps []endpoint
		for _, r := range leaving {
			ep := r.ep
			ep.terminating = true
			eps = append(eps, ep)
		}
		for _, r := range serving {
			eps = append(eps, r.ep)
		}
		if incoming != nil {
			ep := incoming.ep
			ep.notReady = true
			eps = append(eps, ep)
		}
		w.slice("web-1", "web", ports, eps...)
	}
	for i := range replicas {
		r := newReplica(i)
		all, serving = append(all, r), append(serving, r)
	}
	write()

	env := []string{
		"KUBECONFIG=" + kubeconfigVia(b, apiHostPort(b)), "INGRESS_NAMESPACE=" + w.ns, "INGRESS_SERVICE_NAME=web",
		"TARGET_ADDRESS=" + string(mode), "HAPROXY_BACKEND_NAME=be", "HAPROXY_RUNTIME_URL=" + w.h.RuntimeURL(), // shipped check timing
	}
	if dataplane {
		env = append(env, "HAPROXY_DATAPLANE_URL="+testAPI(b, w.h).URL)
	}
	s := startService(b, env...)
	s.wait(b, "/readyz", 10*time.Second)
	names := func(rs []*replica) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.name)
		}
		return out
	}
	fe := w.h.Frontends["be"]
	ask := haproxytest.Ask
	if httpMode {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 3 * time.Second}
		ask = func(addr string) (string, error) { return haproxytest.AskHTTP(client, addr) }
		expectHTTPTraffic(b, ask, fe, names(serving)...)
	} else {
		w.expectTraffic("be", names(serving)...)
	}

	// The clients: each records its requests; read once they stopped.
	results := make([][]answered, rolloutClients)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range rolloutClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				name, err := ask(fe)
				results[c] = append(results[c], answered{start: t0, end: time.Now(), name: name, err: err})
			}
		}()
	}
	stopClients := func() {
		if stop != nil {
			close(stop)
			wg.Wait()
			stop = nil
		}
	}
	defer stopClients()

	b.ResetTimer()
	start := time.Now()
	var events []rolloutEvent
	note := func(what string) { events = append(events, rolloutEvent{time.Now(), what}) }
	for step := range steps {
		in := newReplica(replicas + step)
		all, incoming = append(all, in), in
		write()
		note(in.name + " appears not ready")
		time.Sleep(rolloutNotReady)

		in.readyAt = time.Now()
		incoming, serving = nil, append(serving, in)
		write()
		note(in.name + " ready")

		old := serving[0]
		serving = serving[1:]
		if abrupt {
			old.noNewAt = time.Now()
			old.closeFrom = old.noNewAt
			old.stop()
			old.closeTo = time.Now()
			note(old.name + " closed")
			write()
			note(old.name + " removed")
			time.Sleep(rolloutTerminating)
			continue
		}
		leaving = []*replica{old}
		write()
		old.noNewAt = time.Now()
		note(old.name + " terminating")
		time.Sleep(rolloutTerminating)
		leaving = nil
		write()
		note(old.name + " removed")
		old.closeFrom = time.Now()
		old.stop()
		old.closeTo = time.Now()
		note(old.name + " closed")
	}

	// Converged: exactly the replicas that serve now are in service.
	want := map[string]bool{}
	for _, r := range serving {
		want[r.addr] = true
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		inService := map[string]bool{}
		for _, srv := range w.h.Servers(b, "be") {
			if srv.Up() && !srv.Maint() && !srv.Drain() && srv.Weight > 0 {
				inService[srv.Address] = true
			}
		}
		if len(inService) == len(want) && !slices.ContainsFunc(keys(inService), func(a string) bool { return !want[a] }) {
			break
		}
		if time.Now().After(deadline) {
			stopClients()
			b.Fatalf("rollout not converged 30s after its last step: in service %v, want %v; logs:\n%s", keys(inService), keys(want), tail(s.logs.String(), 30))
		}
	}
	note("converged")
	time.Sleep(300 * time.Millisecond)
	stopClients()
	b.StopTimer()
	// HAProxy's own count of the connections it retried and redispatched.
	stat, err := w.h.Command("show stat")
	if err != nil {
		b.Fatal(err)
	}
	statCount := func(field string) float64 {
		var n float64
		_, _ = fmt.Sscan(haproxytest.StatField(stat, "BACKEND", field), &n)
		return n
	}

	byName := map[string]*replica{}
	for _, r := range all {
		byName[r.name] = r
	}
	var requests, failed, atClose, strict, graced, early int
	var lastLeaving time.Duration
	var failures []answered
	first := map[string]time.Time{} // the end of the first answer after the ready write
	for _, rs := range results {
		for _, a := range rs {
			requests++
			r := byName[a.name]
			if a.err != nil || r == nil {
				failed++
				if slices.ContainsFunc(all, func(r *replica) bool {
					return !r.closeFrom.IsZero() && a.start.Before(r.closeTo) && !a.end.Before(r.closeFrom)
				}) {
					atClose++
				}
				failures = append(failures, a)
				continue
			}
			switch {
			case !r.readyAt.IsZero() && a.end.Before(r.readyAt):
				strict++
				graced++
				early++
			case !r.noNewAt.IsZero() && a.start.After(r.noNewAt):
				strict++
				if late := a.start.Sub(r.noNewAt); late >= rolloutGrace {
					graced++
				}
				lastLeaving = max(lastLeaving, a.start.Sub(r.noNewAt))
			}
			if !r.readyAt.IsZero() && !a.end.Before(r.readyAt) {
				if f, ok := first[r.name]; !ok || a.end.Before(f) {
					first[r.name] = a.end
				}
			}
		}
	}
	var readyFirst []time.Duration
	for _, r := range all[replicas:] {
		f, ok := first[r.name]
		if !ok {
			b.Errorf("%s never answered a request after its ready write", r.name)
			continue
		}
		readyFirst = append(readyFirst, f.Sub(r.readyAt))
	}
	if requests == 0 {
		b.Errorf("no request sent: the load proves nothing")
	}
	if failed > 0 {
		slices.SortFunc(failures, func(x, y answered) int { return x.start.Compare(y.start) })
		var lines []string
		for _, a := range failures[:min(len(failures), 5)] {
			lines = append(lines, fmt.Sprintf("started %s, took %dms: %q %v", around(events, start, a.start), a.end.Sub(a.start).Milliseconds(), a.name, a.err))
		}
		b.Logf("%d of %d requests failed; the first:\n%s", failed, requests, strings.Join(lines, "\n"))
	}
	b.ReportMetric(float64(requests), "requests")
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(float64(atClose), "failed-at-close")
	b.ReportMetric(float64(strict), "to-not-ready")
	b.ReportMetric(float64(graced), "to-not-ready-200ms")
	b.ReportMetric(float64(early), "before-ready")
	b.ReportMetric(statCount("wretr"), "retried")
	b.ReportMetric(statCount("wredis"), "redispatched")
	b.ReportMetric(ms(lastLeaving), "leaving-last-max-ms")
	if len(readyFirst) > 0 {
		b.ReportMetric(ms(median(readyFirst)), "ready-first-p50-ms")
		b.ReportMetric(ms(slices.Max(readyFirst)), "ready-first-max-ms")
	}
}

// rolloutEvent is one thing the rollout did, for the failures' log.
type rolloutEvent struct {
	at   time.Time
	what string
}

// around says when at came relative to start and to what the rollout did
// just before and just after it.
func around(events []rolloutEvent, start, at time.Time) string {
	out := fmt.Sprintf("+%dms", at.Sub(start).Milliseconds())
	for i, e := range events {
		if e.at.After(at) {
			if i > 0 {
				out += fmt.Sprintf(", %dms after %q", at.Sub(events[i-1].at).Milliseconds(), events[i-1].what)
			}
			return out + fmt.Sprintf(", %dms before %q", e.at.Sub(at).Milliseconds(), e.what)
		}
	}
	return out
}

// serveName runs a Go HTTP server on addr that answers every request with
// name, until the returned stop (http.Server.Close: the listener and every
// connection at once) or the end of the test.
func serveName(t testing.TB, name, addr string) func() {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &http.Server{
		Handler:  http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name+"\n") }),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	stop := sync.OnceFunc(func() { _ = srv.Close(); <-done })
	t.Cleanup(stop)
	return stop
}

// expectHTTPTraffic is world.expectTraffic through ask: requests until
// every name in want answers and nothing else does (failures count as "").
func expectHTTPTraffic(t testing.TB, ask func(string) (string, error), fe string, want ...string) {
	t.Helper()
	got := map[string]int{}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = map[string]int{}
		for range 4 * max(len(want), 1) {
			name, err := ask(fe)
			if err != nil {
				name = ""
			}
			got[name]++
		}
		ok := len(got) == len(want)
		for n := range got {
			ok = ok && slices.Contains(want, n)
		}
		if ok {
			return
		}
	}
	t.Fatalf("traffic through %s: %v, want exactly %v", fe, got, want)
}
