package history

import (
	"fmt"
	"sort"
	"testing"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/config"
)

// drawn are the variables a history's configuration or setup draws, with
// what draws them.
var drawn = map[string]string{
	"HAPROXY_DELETE_GUARD_PERCENT":    "Config.Guard: 100, 0 or 10..50",
	"MAX_SERVERS":                     "Config.MaxServers: 6..10 beside up to 16 pods",
	"HAPROXY_DELETE_BATCH":            "Config.DeleteBatch: 1..3 or 10",
	"POD_READINESS_GATE":              "Config.Gate: every pod's verdict is read (invariant gate-truthful)",
	"HAPROXY_CHECK_ON_ERROR":          "Config.OnError",
	"HAPROXY_CHECK_FALL":              "Config.Fall: 1 or 2",
	"HAPROXY_CHECK_RISE":              "Config.Rise: 1..3; the judge's bounds follow (BoundsOf)",
	"HAPROXY_CHECK_INTER":             "Config.Inter: 1 s..2 s",
	"HAPROXY_CHECK_FASTINTER":         "Config.FastInter: 50..200 ms",
	"HAPROXY_CHECK_DOWNINTER":         "Config.DownInter: 100..500 ms",
	"HAPROXY_CHECK_HEALTH_NODE_PORT":  "Setup.HealthPort (a third of node-mode histories): the Service's healthCheckNodePort, answered by each Node's kube-proxy; auto with HAPROXY_BALANCE and the Data Plane driver (the service writes the HTTP check), else on (haproxy.cfg's option httpchk); auto elsewhere",
	"HAPROXY_BACKEND_PORT":            "Config.FixedPort in a quarter of single-Service histories: set to the port pods and Nodes listen on, Kubernetes giving another where nothing listens (Converges compares each server's port; traffic flows only through the fixed one)",
	"HAPROXY_BALANCE":                 "Config.Balance: roundrobin, leastconn or random in a third; the Data Plane driver writes it once per backend and writer (ReloadsAsPromised bounds the reloads), Converges reads HAProxy's running algorithm (the runtime driver's stays haproxy.cfg's)",
	"HAPROXY_DRAIN_TIMEOUT":           "Config.DrainTimeout: 0, 1 s or 2 s, beside long-lived sessions and gone pods whose process lingers (pod mode; SessionsKept, DrainBounded)",
	"HAPROXY_SEND_PROXY_V2":           "Config.SendProxy: pods refuse a connection without the header; class histories: classDraw, with ipMode Proxy judged",
	"CLUSTER_NAME":                    "Setup.Static: a server of another instance beside this one's; Config.Writer2 cluster: a second instance (west) on the same backend",
	"HAPROXY_LOCAL_ZONE":              "Setup.Zones",
	"HAPROXY_BACKENDS":                "Config.Ports (a quarter of pod-mode single-Service histories without the gate or a fixed port): the Service's second port fills be2, judged by Converges as be is",
	"HAPROXY_CHECK_KUBE_PROXY_PORT":   "Setup.KubeProxy (half of Setup.HealthPort's): the Service a NodePort without healthCheckNodePort, Nodes checked on kube-proxy's own port (200 whatever the pods, 503 under the autoscaler's taint)",
	"HAPROXY_RUNTIME_URL":             "Setup.Driver and Setup.Targets: one or two sockets",
	"ALLOWED_SERVER_CIDRS":            "the pods' and Nodes' networks and 127.0.0.0/16; Config.Hostile (a third) adds ready endpoints outside it, with leading zeros, of IPv6 (hostile.go): a server for one runs for no pod (Converges)",
	"ENDPOINTSLICE_MANAGED_BY":        "Config.Hostile: the controller's, beside a slice the mirroring controller manages",
	"HAPROXY_DATAPLANE_URL":           "Setup.Driver: the Data Plane driver with both URLs",
	"SERVICE_SELECTION":               "the services shape: annotation",
	"ANNOTATION_BACKENDS":             "the services shape: be,be2",
	"TARGET_ADDRESS":                  "NodeSetupOf (shapes nodes, nodes-soak; half of make soak's single-Service histories): node, beside 3 to 5 Nodes' kube-proxies; pod elsewhere",
	"HAPROXY_WEIGHT":                  "Config.Weight (node mode): endpoints or equal, the weight compared by converges",
	"CORDONED_NODES":                  "Config.DrainCordoned (node mode): drain or ignore, beside NodeCordon steps",
	"WATCH":                           "ServeSetupOf (shapes serve, serve-soak): the binary's serve watches a real kube-apiserver (the shipped true)",
	"KUBECONFIG":                      "ServeSetupOf: serve and the one-shot command reach the history's kube-apiserver",
	"WEBHOOK_AUTH":                    "ServeSetupOf: token, as shipped; Config.Posts sends curl's POST and Knative's CloudEvent with it",
	"WEBHOOK_TOKEN":                   "ServeSetupOf: the token Config.Posts' callers send",
	"SERVICE_EVENTS":                  "Config.Events (serve histories): true or false",
	"RESYNC_PERIOD":                   "Config.Resync (serve histories): 0, 3 s or 7 s",
	"LOAD_BALANCER_CLASS":             "class histories (RunClass): serve in class mode",
	"HAPROXY_VIP":                     "class histories: every VIP port's frontend, judged through its clients",
	"WATCH_NAMESPACES":                "class histories: the history's namespace",
	"HAPROXY_RUNTIME_TLS_CA":          "Setup.TLS (a third of the seeds without a refused pod): every admin socket over TLS, the client certificate valid 20 s and renewed every 8 s in a kubelet-style Secret folder",
	"HAPROXY_RUNTIME_TLS_CERT":        "Setup.TLS",
	"HAPROXY_RUNTIME_TLS_KEY":         "Setup.TLS",
	"HAPROXY_RUNTIME_TLS_SERVER_NAME": "Setup.TLS: haproxy.test, the URLs' hosts being addresses",
}

// invisible are the variables that change nothing a history could see,
// with why.
var invisible = map[string]string{
	"INGRESS_NAMESPACE":               "a name: the history's Service is hist/web",
	"INGRESS_SERVICE_NAME":            "a name: the history's Service is hist/web",
	"HAPROXY_BACKEND_NAME":            "a name: the history's backend is be",
	"HAPROXY_DATAPLANE_USERNAME":      "credentials: the test API takes any",
	"HAPROXY_DATAPLANE_PASSWORD":      "credentials: the test API takes any",
	"HAPROXY_DATAPLANE_TOKEN":         "credentials: the test API takes any",
	"HAPROXY_DATAPLANE_CA_FILE":       "transport: http on loopback",
	"WEBHOOK_TOKEN_FILE":              "the HTTP routes' auth",
	"WEBHOOK_AUDIENCE":                "the HTTP routes' auth",
	"WEBHOOK_ALLOWED_SERVICEACCOUNTS": "the HTTP routes' auth",
	"PORT":                            "the HTTP listener",
	"LOG_LEVEL":                       "logs only",
	"LOG_FORMAT":                      "logs only",
	"KUBE_CONTEXT":                    "how Kubernetes is reached",
	"RECONCILE_TIMEOUT":               "kept at the shipped 30 s: the HA pair's hang (HangFor) is drawn against it",
	"HAPROXY_VIP_HOSTNAME":            "the status's hostname instead of the VIP: class histories judge the VIP",
}

// notDrawn are the variables that change what a history could see and
// that no history draws yet, with why: said aloud by the test, and in
// docs/guarantees.md.
var notDrawn = map[string]string{}

// TestEveryVariableIsDrawnOrExcused: each variable of help is drawn by the
// histories, or listed with why no history draws it. A new variable fails
// here until it is one or the other.
func TestEveryVariableIsDrawnOrExcused(t *testing.T) {
	var gaps []string
	for _, v := range config.Variables() {
		_, d := drawn[v]
		_, i := invisible[v]
		why, n := notDrawn[v]
		switch {
		case !d && !i && !n:
			t.Errorf("%s is neither drawn by the histories (ConfigOf, SetupOf) nor listed with its reason", v)
		case n:
			gaps = append(gaps, v+": "+why)
		}
	}
	for _, list := range []map[string]string{drawn, invisible, notDrawn} {
		for v := range list {
			if !contains(config.Variables(), v) {
				t.Errorf("%s is listed but is no variable of the service", v)
			}
		}
	}
	sort.Strings(gaps)
	for _, g := range gaps {
		t.Logf("not drawn yet: %s", g)
	}
}

// TestConfigOfDrawsEverySetting: over a hundred seeds, each drawn setting
// takes each of its kinds of value, and the draw is a function of the seed.
func TestConfigOfDrawsEverySetting(t *testing.T) {
	seen := map[string]bool{}
	for seed := uint64(0); seed < 100; seed++ {
		c := ConfigOf(seed)
		if c != ConfigOf(seed) {
			t.Fatalf("seed %d: two draws differ", seed)
		}
		seen["guard-off"] = seen["guard-off"] || c.Guard == GuardOff
		seen["guard-low"] = seen["guard-low"] || c.Guard > 0
		seen["guard-shipped"] = seen["guard-shipped"] || c.Guard == 0
		seen["cap"] = seen["cap"] || c.MaxServers > 0
		seen["batch"] = seen["batch"] || c.DeleteBatch > 0
		seen["gate"] = seen["gate"] || c.Gate
		seen["on-error"] = seen["on-error"] || c.OnError != ""
		seen["fall"] = seen["fall"] || c.Fall == 1
		seen["rise"] = seen["rise"] || c.Rise == 1 || c.Rise == 3
		seen["drain"] = seen["drain"] || c.DrainTimeout > 0
		seen["timings"] = seen["timings"] || c.Inter > 0 && c.FastInter > 0 && c.DownInter > 0
		seen["send-proxy"] = seen["send-proxy"] || c.SendProxy
		seen["fixed-port"] = seen["fixed-port"] || c.FixedPort
		seen["ports"] = seen["ports"] || c.Ports
		seen["hostile"] = seen["hostile"] || c.Hostile
		if c.Balance != "" {
			seen["balance-"+c.Balance] = true
		}
		seen["replica"] = seen["replica"] || c.Writer2 == "replica"
		seen["cluster"] = seen["cluster"] || c.Writer2 == "cluster"
		seen["refused"] = seen["refused"] || c.Refused > 0
		seen["shipped"] = seen["shipped"] || c == Config{}
	}
	for seed := uint64(0); seed < 100; seed++ {
		s := NodeSetupOf(seed, Runtime)
		if s.Nodes < 3 || s.Nodes > 5 || s.Config.Gate || s.Config.Refused != 0 || s.Config.MaxServers > s.Nodes {
			t.Fatalf("seed %d: node setup %+v", seed, s)
		}
		seen["nodes-"+fmt.Sprint(s.Nodes)] = true
		seen["weight"] = seen["weight"] || s.Config.Weight
		seen["drain-cordoned"] = seen["drain-cordoned"] || s.Config.DrainCordoned
		seen["node-cap"] = seen["node-cap"] || s.Config.MaxServers > 0
		seen["oneshot"] = seen["oneshot"] || s.Config.OneShot
		seen["health-port"] = seen["health-port"] || s.HealthPort && !s.KubeProxy
		seen["kube-proxy-port"] = seen["kube-proxy-port"] || s.KubeProxy
		if s.KubeProxy && !s.HealthPort {
			t.Fatalf("seed %d: kube-proxy's port drawn without an HTTP check of Nodes", seed)
		}
	}
	for _, k := range []string{"guard-off", "guard-low", "guard-shipped", "cap", "batch", "gate", "on-error", "fall", "send-proxy", "replica", "cluster", "refused",
		"rise", "drain", "timings", "fixed-port", "ports", "hostile", "balance-roundrobin", "balance-leastconn", "balance-random",
		"nodes-3", "nodes-4", "nodes-5", "weight", "drain-cordoned", "node-cap", "oneshot", "health-port", "kube-proxy-port"} {
		if !seen[k] {
			t.Errorf("no seed of 100 draws %s", k)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestServeDrawsAThirdTarget: a third of the pairs in serve histories are
// three HAProxies, in both modes.
func TestServeDrawsAThirdTarget(t *testing.T) {
	three := map[bool][]uint64{} // node mode: seeds
	for seed := range uint64(300) {
		if s := ServeSetupOf(seed, Runtime); s.Targets == 3 {
			three[s.Nodes > 0] = append(three[s.Nodes > 0], seed)
		} else if s.Targets < 1 || s.Targets > 2 {
			t.Fatalf("seed %d: %d targets", seed, s.Targets)
		}
	}
	for _, node := range []bool{false, true} {
		if n := len(three[node]); n < 10 {
			t.Errorf("node mode %v: %d of 300 serve seeds draw three targets", node, n)
		}
	}
	t.Logf("three targets: pod mode %v, node mode %v", three[false][:3], three[true][:3])
}
