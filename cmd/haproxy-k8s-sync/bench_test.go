package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/dataplanetest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/desired/desiredtest"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/haproxytest"
)

// BenchmarkStartToReady measures process start to the first 200 on /readyz
// without watches (WATCH=false, as on Knative); with watches, readiness also
// waits for the API server and a first reconcile (sync/e2e measures that).
func BenchmarkStartToReady(b *testing.B) {
	kc := kubeconfigB(b)
	for b.Loop() {
		port := freePortB(b)
		cmd := command(nil, "serve", "HAPROXY_DATAPLANE_URL=http://127.0.0.1:1", "KUBECONFIG="+kc, fmt.Sprintf("PORT=%d", port), "WATCH=false", "WEBHOOK_AUTH=none")
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
		for {
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Since(start) > 10*time.Second {
				b.Fatal("never ready")
			}
			time.Sleep(time.Millisecond)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-to-ready")
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// BenchmarkServiceRSS runs the service against the test Data Plane API with
// 1 000 endpoints read from manifests, one reconcile per op, and reports the
// service process's resident memory at the end (run with -benchtime 1000x).
func BenchmarkServiceRSS(b *testing.B) {
	api := dataplanetest.New(b, dataplanetest.Options{})
	rr := "roundrobin"
	api.AddBackend(models.Backend{BackendBase: models.BackendBase{Name: "web", Mode: "tcp", AdvCheck: "tcp-check", Balance: &models.Balance{Algorithm: &rr}}})
	ips := make([]string, 1000)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)
	}
	in := desiredtest.PodCluster("shop", "web", ips...)
	in.Service.APIVersion, in.Service.Kind = "v1", "Service"
	in.Slices[0].APIVersion, in.Slices[0].Kind = "discovery.k8s.io/v1", "EndpointSlice"
	var docs bytes.Buffer
	for _, o := range []any{in.Service, &in.Slices[0]} {
		j, _ := json.Marshal(o)
		docs.Write(j)
		docs.WriteString("\n")
	}
	manifests := filepath.Join(b.TempDir(), "cluster.json")
	if err := os.WriteFile(manifests, docs.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	port := freePortB(b)
	cmd := command(nil, "serve --manifests "+manifests, "HAPROXY_DATAPLANE_URL="+api.URL, "TARGET_ADDRESS=pod",
		"INGRESS_NAMESPACE=shop", "INGRESS_SERVICE_NAME=web", fmt.Sprintf("PORT=%d", port), "LOG_LEVEL=error", "RECONCILE_TIMEOUT=60s", "WEBHOOK_AUTH=none")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("never ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Post(base+"/reconcile", "", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("reconcile: %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	if n := len(api.Servers("web")); n != 1000 {
		b.Fatalf("%d servers", n)
	}
	b.ReportMetric(rssMB(b, cmd.Process.Pid), "rss-MB")
}

func rssMB(b *testing.B, pid int) float64 { return statusMB(b, pid, "VmRSS:") }

// statusMB is a memory field of /proc/PID/status (VmRSS:, VmHWM: the peak),
// in MB.
func statusMB(b *testing.B, pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.Atoi(strings.Fields(rest)[0])
			return float64(kb) / 1024
		}
	}
	b.Fatal("no " + field)
	return 0
}

func freePortB(b *testing.B) int {
	ln, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return portOf(ln)
}

func kubeconfigB(b *testing.B) string {
	p := filepath.Join(b.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"http://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkServiceRSSManyServices runs serve in annotation mode from
// manifests with many Services (HKS_BENCH_RSS_SERVICES, 2,000 unless
// told), each naming its own backend with two ready pods (every Service's
// pods answer on the same two listeners: what is measured is the service),
// against a real HAProxy through its admin socket; one full reconcile
// (POST /reconcile, a no-op) per op once every server is in service, and
// reports the service process's resident memory at the end, beside the
// shipped limit of 128 Mi.
func BenchmarkServiceRSSManyServices(b *testing.B) {
	n := 2000
	if s := os.Getenv("HKS_BENCH_RSS_SERVICES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("HKS_BENCH_RSS_SERVICES: %v", err)
		}
	}
	podPort := haproxytest.FreePort(b, "127.1.0.1")
	haproxytest.Listen(b, "a", fmt.Sprintf("127.1.0.1:%d", podPort))
	haproxytest.Listen(b, "b", fmt.Sprintf("127.1.0.2:%d", podPort))
	var bes []haproxytest.Backend
	var docs strings.Builder
	for i := range n {
		be := fmt.Sprintf("be_%04d", i)
		bes = append(bes, haproxytest.Backend{Name: be, Lines: []string{"balance roundrobin", "option tcp-check"}})
		fmt.Fprintf(&docs, "---\napiVersion: v1\nkind: Service\nmetadata: {name: web%04d, namespace: shop, annotations: {haproxy-k8s-sync.io/backends: %s}}\nspec: {ports: [{name: http, port: 80}]}\n", i, be)
		fmt.Fprintf(&docs, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web%04d-1, namespace: shop, labels: {kubernetes.io/service-name: web%04d}}\naddressType: IPv4\nports: [{name: http, port: %d}]\nendpoints:\n", i, i, podPort)
		for k := range 2 {
			fmt.Fprintf(&docs, "- {addresses: [127.1.0.%d], conditions: {ready: true}, targetRef: {kind: Pod, namespace: shop, name: web%04d-%d}}\n", k+1, i, k)
		}
	}
	h := haproxytest.Start(b, bes...)
	manifests := filepath.Join(b.TempDir(), "shop.yaml")
	if err := os.WriteFile(manifests, []byte(docs.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	port := freePortB(b)
	cmd := command(nil, "serve --manifests "+manifests, "SERVICE_SELECTION=annotation", "ANNOTATION_BACKENDS=be_*", "HAPROXY_RUNTIME_URL="+h.RuntimeURL(),
		"TARGET_ADDRESS=pod", "ALLOWED_SERVER_CIDRS=127.1.0.0/16", fmt.Sprintf("PORT=%d", port), "LOG_LEVEL="+cmp.Or(os.Getenv("HKS_BENCH_LOG"), "error"), "RECONCILE_TIMEOUT=60s", "WEBHOOK_AUTH=none")
	if l := os.Getenv("HKS_BENCH_GOMEMLIMIT"); l != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+l) // the chart's extraEnv knob
	}
	if os.Getenv("HKS_BENCH_LOG") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	full := func() int {
		resp, err := http.Post(base+"/reconcile", "", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// In service: UP (op 2), not parked (admin 0).
	serving := func() int {
		reply, err := h.Command("show servers state")
		if err != nil {
			return 0
		}
		got := 0
		for line := range strings.Lines(reply) {
			if f := strings.Fields(line); len(f) > 6 && strings.HasPrefix(f[4], "127.1.0.") && f[5] == "2" && f[6] == "0" {
				got++
			}
		}
		return got
	}
	for deadline := time.Now().Add(3 * time.Minute); serving() != 2*n; {
		if time.Now().After(deadline) {
			b.Fatalf("%d servers in service of %d in 3 minutes", serving(), 2*n)
		}
		time.Sleep(time.Second)
		full()
	}
	b.ResetTimer()
	for b.Loop() {
		if code := full(); code != 200 {
			b.Fatalf("full reconcile: %d", code)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "services")
	b.ReportMetric(rssMB(b, cmd.Process.Pid), "rss-MB")
	b.ReportMetric(statusMB(b, cmd.Process.Pid, "VmHWM:"), "peak-rss-MB")
}
